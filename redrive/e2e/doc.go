// Package e2e holds the re-drive's tests that need Kafka and a database
// together: end to end through a consumer, several schedulers on one
// PostgreSQL, a scheduler killed mid-sweep, and the benchmarks. It is a
// module of its own so that neither store's module depends on a Kafka
// client. Tests that need PostgreSQL skip when REDELIVER_POSTGRES_URL is
// not set; those that can run on a real broker do so when
// REDELIVER_KAFKA_BROKERS is set, besides kfake.
package e2e
