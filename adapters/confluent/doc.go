// Package confluent turns a confluentinc/confluent-kafka-go (librdkafka)
// consumer group into [stream.Claim]s for a [stream.Processor]. It needs
// cgo; the module is its own, so that no other module of redeliver does.
package confluent
