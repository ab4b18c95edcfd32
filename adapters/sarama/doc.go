// Package sarama turns an IBM/sarama consumer group into [stream.Claim]s
// for a [stream.Processor]: for each partition sarama assigns, the worker
// runs [stream.Processor.Process] in sarama's ConsumeClaim.
package sarama
