module github.com/redeliver-go/redeliver/adapters/confluent/confluenthost

go 1.25.2

require (
	github.com/confluentinc/confluent-kafka-go/v2 v2.11.1
	github.com/redeliver-go/redeliver v0.1.0
	github.com/redeliver-go/redeliver/adapters/confluent v0.1.0
	github.com/redeliver-go/redeliver/host v0.1.0
)

require github.com/tailscale/hujson v0.0.0-20250605163823-992244df8c5a // indirect
