module github.com/redeliver-go/redeliver/adapters/sarama/saramahost

go 1.26.0

require (
	github.com/IBM/sarama v1.61.1
	github.com/redeliver-go/redeliver v0.1.0
	github.com/redeliver-go/redeliver/adapters/sarama v0.1.0
	github.com/redeliver-go/redeliver/host v0.1.0
)
