module github.com/redeliver-go/redeliver/adapters/confluent

go 1.25.2

require (
	github.com/confluentinc/confluent-kafka-go/v2 v2.11.1
	github.com/redeliver-go/redeliver v0.1.0
)
