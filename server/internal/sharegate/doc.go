// Package sharegate hands out slots for work that must not starve a
// node's write path: reads and the fan-out to watchers and dashboards.
//
// Guarantees: at most n jobs hold slots at once, the others wait parked,
// served in turn, until a slot frees or their context ends. While writes
// wait, a slot whose job took d serves its next job only d*(1-share)/share
// later; a job holds its slot to itself at most hold.
//
// Not guaranteed: a share of the CPU. The gate measures how long jobs
// hold slots, not what they cost, and does nothing while no write waits.
package sharegate
