// Package proc is the harness's process control: what each child process
// runs (RunChild: a fenced node, the reference store or a Go worker, told
// by a JSON spec), how the harness starts, freezes, kills and restarts it
// (Child), and the lease-service nodes the faults act on (Node: a local
// node process, or the user's own deployment driven by shell commands).
// A node and a store run in a build with the failpoints can simulate power
// losses (internal/failpoint): the harness only sets their environment.
//
// # Guarantees
//
//   - A Child's log is appended across restarts, and every exit the
//     harness did not cause (Kill, Stop, or an exit declared expected) is
//     reported to OnExit, so a crash of its own is never mistaken for an
//     injected one.
//   - Every child is in its own process group and, on Linux, killed by the
//     kernel if the harness dies (Pdeathsig).
//   - A node serves at once after a start, before it leads, so requests
//     during recovery are part of the test.
//
// # Non-guarantees
//
//   - It needs Unix signals (SignalsSupported): elsewhere runs are refused
//     with ErrUnsupported.
//   - An external node (NewExternalNode) is only as crashable as the
//     user's commands make it; its Up is what the harness last did to it.
//   - It decides no fault and judges nothing: the engine (package torture)
//     does the one, package check the other.
package proc
