// Package engine is the kafkago adapter's consumer: the group generations,
// the partitions' claims and their fetchers. The kafkago package is its
// public face; its options fill a [Config].
//
// The adapter's tests live in a module of their own, so that a program using
// the adapter pulls no test broker; the functions in seams.go are what they
// reach inside the engine through.
package engine
