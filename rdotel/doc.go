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
// One Telemetry serves the processors of one consumer group; each
// processor gets its own hooks and middleware (call Hooks and Middleware
// once per processor). In a host of functions, give each function its own
// at Register, from a Telemetry of its group:
//
//	tel, err := rdotel.New(rdotel.WithConsumerGroup("orders-app"))
//	h.Register("orders", handler, host.WithHooks(tel.Hooks()), host.WithMiddleware(tel.Middleware()))
//
// The re-drive of parked records (package redrive) reports through hooks
// of its own: give [Telemetry.RedriveHooks] with redrive.WithHooks to the
// scheduler and to the Park action, or to host.WithRedrive, which gives
// its options to both:
//
//	h, err := host.New(cfg, host.WithRedrive(store, redrive.WithHooks(tel.RedriveHooks())))
//
// # Semantic conventions
//
// Names and attributes follow the OpenTelemetry semantic conventions for
// messaging, version 1.43.0 (the meter and the tracer carry its schema
// URL, https://opentelemetry.io/schemas/1.43.0); redeliver's own metrics
// are in the same style under "redeliver.". No metric carries an offset,
// a key or an error's text: error.type is the error's type.
//
// # Metrics
//
// The attribute sets below are: partition = messaging.system,
// messaging.destination.name (the topic), messaging.destination.partition.id
// and messaging.consumer.group.name (when set); topic = the same without
// the partition; processor = messaging.system and
// messaging.consumer.group.name (when set): the Telemetry's, also for the
// re-drive's metrics. An attribute in parentheses is there only when it
// applies.
//
//	metric                              instrument     unit         attributes
//	messaging.client.consumed.messages  counter        {message}    partition, messaging.operation.name
//	messaging.process.duration          histogram      s            partition, messaging.operation.name, redeliver.attempt, (error.type)
//	redeliver.retries.scheduled         counter        {retry}      partition, (error.type)
//	redeliver.batches.given_up          counter        {batch}      partition, redeliver.reason
//	redeliver.exhaustion.actions        counter        {action}     partition, (redeliver.action), redeliver.action.outcome
//	redeliver.redelivery.lateness       histogram      s            partition
//	redeliver.partitions.backoff        gauge          {partition}  topic
//	redeliver.partitions.stopped        gauge          {partition}  topic
//	redeliver.checkpoint.withheld.age   gauge          s            partition
//	redeliver.outages                   counter        {outage}     processor
//	redeliver.outage.active             updowncounter  {processor}  processor
//	redeliver.outage.probes             counter        {probe}      processor
//	redeliver.outage.duration           histogram      s            processor
//	redeliver.redrive.redrives          counter        {redrive}    processor, (messaging.destination.name)
//	redeliver.redrive.reparks           counter        {repark}     processor, (messaging.destination.name)
//	redeliver.redrive.timeouts          counter        {timeout}    processor, (messaging.destination.name)
//	redeliver.redrive.failures          counter        {failure}    processor, (messaging.destination.name), error.type
//	redeliver.redrive.sweeps.failed     counter        {sweep}      processor, error.type
//
// What each one says:
//
//   - messaging.client.consumed.messages: records delivered to the
//     handler, each counted once per processor: a retry, the rest of a
//     batch after a partial success and a batch resumed after a stop count
//     nothing again. messaging.operation.name is "poll" for Kafka and
//     "receive" for the other systems.
//   - messaging.process.duration: each handler call, in seconds, in the
//     buckets the conventions advise (5ms to 10s); messaging.operation.name
//     "process", redeliver.attempt the delivery's attempt from 1 (capped
//     at 10), error.type when it failed.
//   - redeliver.retries.scheduled: batches withheld for another delivery;
//     error.type unless the handler asked for the retry (a RetryResult).
//   - redeliver.batches.given_up: failed batches given up (only the failed
//     record, when the handler named it), by redeliver.reason:
//     retries_spent, time_budget_spent, record_too_old, not_retryable.
//   - redeliver.exhaustion.actions: tries of the exhaustion action on a
//     given-up batch, by redeliver.action.outcome (succeeded, failed,
//     stopped, skipped by an operator) and redeliver.action (skip,
//     dead_letter, park, stop) when [WithExhaustionAction] names the
//     processor's action. In key ordering with redrive.ParkByKey, a
//     record parked behind the parked records of its key (not handled:
//     the stream.ParkedBehind outcome) counts here once, with the
//     outcome parked_behind, and is neither timed in
//     messaging.process.duration nor counted as a success; it counts in
//     messaging.client.consumed.messages, as a record taken in.
//   - redeliver.redelivery.lateness: seconds from a retry's due time to the
//     start of its delivery, for the retries no outage held back.
//   - redeliver.partitions.backoff, redeliver.partitions.stopped:
//     partitions waiting out a backoff (until their retry is due), and
//     stopped after exhaustion until Resume or Skip; a partition is in one
//     of them at most.
//   - redeliver.checkpoint.withheld.age: per partition, seconds since its
//     checkpoint was first withheld for the batch it holds (a backoff, an
//     outage, an exhaustion action that keeps failing, a stop); 0 when
//     none is. The number to alert on.
//   - redeliver.outages, redeliver.outage.active, redeliver.outage.probes,
//     redeliver.outage.duration: with an outage budget
//     (stream.WithOutageBudget), the outages begun, the processors in one
//     now, the batches delivered to probe the downstream, and how long
//     each outage lasted.
//   - redeliver.redrive.redrives, redeliver.redrive.reparks,
//     redeliver.redrive.timeouts, redeliver.redrive.failures,
//     redeliver.redrive.sweeps.failed: the re-drive of parked records,
//     from [Telemetry.RedriveHooks]. messaging.destination.name is the
//     topic of the entry's record (its original topic, not the retry
//     topic), absent for an entry whose record has none.
//   - redeliver.redrive.redrives: entries re-published and marked
//     retrying (a publish whose mark a store error lost is published
//     again, and counted then).
//   - redeliver.redrive.reparks: re-driven records that failed again and
//     were handed back to their entry by the Park action, each re-drive
//     once. The count to alert on: a poison record going round until its
//     entry times out.
//   - redeliver.redrive.timeouts: entries timed out after the retry
//     timeout or the maximum re-drives, and reported.
//   - redeliver.redrive.failures: entries that could not be re-published,
//     or reported to the reply topic, by the publisher's error.type; each
//     is tried again after the interval.
//   - redeliver.redrive.sweeps.failed: sweeps ended early by a store
//     error, by its error.type; the next sweep starts over.
//
// # Traces
//
// The middleware starts a span per delivery ("process <topic>", kind
// consumer, messaging.operation.type and messaging.operation.name
// "process") and hands its context to the handler. When the batch is one
// record whose headers carry a W3C traceparent, the span continues that
// trace; otherwise it links to each record's trace context (up to
// [WithMaxLinks]). A redelivery is a new span, linked to the batch's first
// delivery. Spans carry the attempt (redeliver.attempt, from 1), whether
// it is a retry (redeliver.retry), the batch size, the first offset
// (messaging.kafka.offset, for Kafka) and the outcome (redeliver.outcome:
// succeeded, retry_requested, failed); a failed delivery, a panic
// included, has status Error and error.type. [RecordContext] extracts one
// record's trace context, for handlers that process records one by one.
package rdotel
