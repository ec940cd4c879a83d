// Package apierr holds the domain errors a node refuses calls with, and
// the one mapping of them to Connect codes (Connect), for the node and its
// API handlers alike.
//
// Guarantees: Connect is the only place that chooses a Connect code for a
// domain error, and it keeps the error's message: the code and message a
// client sees for an error are those of the error the node returned,
// byte for byte. A refused holding carries a LeaseHeld detail naming the
// holder. An uncertain write (ErrUncertain) is never mapped to a code that
// says "not applied".
//
// Not guaranteed: an error this package does not know maps to internal;
// errors are matched by errors.Is and errors.As, so a wrapped error takes
// the code of the first match in Connect's order.
package apierr
