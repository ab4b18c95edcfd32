module github.com/redeliver-go/redeliver/adapters/kafkago/kafkagohost

go 1.25.2

require (
	github.com/redeliver-go/redeliver v0.1.0
	github.com/redeliver-go/redeliver/adapters/kafkago v0.1.0
	github.com/redeliver-go/redeliver/host v0.1.0
	github.com/segmentio/kafka-go v0.4.51
)

require (
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/pierrec/lz4/v4 v4.1.33 // indirect
	github.com/tailscale/hujson v0.0.0-20250605163823-992244df8c5a // indirect
)
