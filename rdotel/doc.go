// Package rdotel reports what a redeliver [stream.Processor] does as
// OpenTelemetry metrics and traces.
//
// It plugs into the processor through its hooks and a middleware, and the
// core of redeliver never imports OpenTelemetry: only programs that import
// this module pull it in.
//
//	tel, err := rdotel.New(
//		rdotel.WithMeterProvider(mp),   // default: otel.GetMeterProvider()
//		rdotel.WithTracerProvider(tp),  // default: otel.GetTracerProvider()
//		rdotel.WithConsumerGroup("orders"),
//	)
//	proc, err := stream.NewProcessor(stream.Chain(handler, tel.Middleware()),
//		stream.WithHooks(tel.Hooks()), ...)
//
// # Metrics
//
// Names follow OpenTelemetry's semantic conventions for messaging where they
// exist; redeliver's own are in the same style under "redeliver.". Every
// instrument carries messaging.system, messaging.destination.name (the
// topic), messaging.destination.partition.id and, when set,
// messaging.consumer.group.name.
//
//	messaging.client.consumed.messages  counter    records delivered for the first time
//	messaging.process.duration          histogram  seconds per handler call; redeliver.attempt, error.type
//	redeliver.retries.scheduled         counter    batches withheld for another delivery; error.type
//	redeliver.batches.given_up          counter    batches given up; redeliver.reason (retries spent, time budget, ...)
//	redeliver.exhaustion.actions        counter    tries of the exhaustion action, by redeliver.action
//	                                               (WithExhaustionAction) and redeliver.action.outcome
//	                                               (succeeded, failed, stopped, skipped)
//	redeliver.redelivery.lateness       histogram  seconds from a retry's due time to its delivery's start
//	redeliver.partitions.backoff        gauge      partitions waiting out a backoff
//	redeliver.partitions.stopped        gauge      partitions stopped after exhaustion (StopPartition)
//	redeliver.checkpoint.withheld.age   gauge      per partition, seconds since its checkpoint was first
//	                                               withheld for the batch it holds (0 when none is)
//
// With an outage budget (stream.WithOutageBudget), four more, which carry
// messaging.system and messaging.consumer.group.name only:
//
//	redeliver.outages                   counter    outages begun: the budget ran out
//	redeliver.outage.active             updown     processors in an outage now (1 per processor)
//	redeliver.outage.probes             counter    batches delivered to probe the downstream
//	redeliver.outage.duration           histogram  seconds from an outage's beginning to its end
//
// The last one is the number to alert on: how long a partition has been held
// back by a batch that keeps failing.
//
// # Traces
//
// The middleware starts a span per delivery ("process <topic>", kind
// consumer) and hands its context to the handler. When the batch is one
// record whose headers carry a W3C traceparent, the span continues that
// trace; otherwise it links to each record's trace context (up to
// [WithMaxLinks]). A redelivery is a new span, linked to the batch's first
// delivery. Spans carry the attempt (redeliver.attempt, from 1), the batch
// size and the outcome; a failed delivery has status Error.
// [RecordContext] extracts one record's trace context, for handlers that
// process records one by one.
package rdotel
