// Package engine is the franz adapter's consumer: the group's callbacks,
// the partitions' claims, their buffers and fetch-ahead, the commits and
// the poll loop. The franz package is its public face; its options fill a
// [Config].
//
// The adapter's tests live in a module of their own (adapters/franz/tests),
// so that a program using the adapter pulls no test broker; the functions
// in seams.go are what they reach inside the engine through.
package engine
