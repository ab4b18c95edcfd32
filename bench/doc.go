// Package bench holds benchmarks that measure redeliver beside other Kafka
// consumers (peers): raw franz-go and kafka-go loops, kafka-go's
// kafka.Reader, and Watermill's Kafka subscriber. It is a module of its own
// so that no program using redeliver pulls the peers' dependencies (Watermill,
// sarama). It has no code a program would import: everything is in its
// benchmarks, which scripts/bench.sh runs; see docs/BENCHMARKS.md.
package bench
