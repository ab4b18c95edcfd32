module github.com/redeliver-go/redeliver/adapters/confluent/tests

go 1.26.0

require (
	github.com/confluentinc/confluent-kafka-go/v2 v2.11.1
	github.com/redeliver-go/redeliver v0.1.0
	github.com/redeliver-go/redeliver/adapters/confluent v0.1.0
	github.com/redeliver-go/redeliver/adapters/internal/kafkatest v0.1.0
	github.com/twmb/franz-go v1.22.2
	github.com/twmb/franz-go/pkg/kfake v0.0.0-20260918054303-01f206a7e32c
	github.com/twmb/franz-go/pkg/kmsg v1.15.0
)

require (
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/pierrec/lz4/v4 v4.1.33 // indirect
	github.com/twmb/franz-go/pkg/kadm v1.19.0 // indirect
)
