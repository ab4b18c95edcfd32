// Package host runs named functions, each a [stream.Handler] bound to a
// trigger (a Kafka topic and consumer or share group, through one of the
// host's adapters; or, through a [Source], any other consumer of a
// processor, such as an Event Hub's) with its own retry policy, as an Azure
// Functions host runs the functions of an app; and it serves their health
// and status over HTTP.
//
//	cfg, err := hostconfig.Load("host.json")  // policies and triggers
//	franz, err := franzhost.New()              // the Kafka client the triggers use
//	h, err := host.New(cfg, host.WithAdapter(franz), host.WithBrokers("127.0.0.1:9092"), host.WithHTTP(":8080"))
//	h.Register("orders", ordersHandler)         // trigger from host.json's triggers section
//	h.Register("payments", paymentsHandler,     // or from code
//		host.Kafka{Topic: "payments", Group: "payments-app"})
//	err = h.Run(ctx)                            // until ctx is done; every worker has stopped
//
// The host's module builds no Kafka client itself: each trigger runs on
// the [Adapter] it names, given with [WithAdapter] from a module of its own
// beside the client's adapter, so that a program builds only the clients
// it uses: adapters/franz/franzhost (twmb/franz-go, "franz", the default
// of a trigger that names none), adapters/kafkago/kafkagohost
// (segmentio/kafka-go, "kafkago"), adapters/sarama/saramahost (IBM/sarama,
// "sarama") and adapters/confluent/confluenthost (confluent-kafka-go,
// "confluent", with cgo). A trigger that names an adapter the
// host was not given is an error when Run starts, which says what to add.
//
// Each function gets its own [stream.Processor] (its policy and exhaustion
// action from host.json's checkpointRetryPolicy.functions, else the
// host-wide policy) and its own consumer and client, since each consumer
// group needs a client of its own. The logger, the hooks and the
// middleware given to [New] and the dead-letter publisher are shared.
// Telemetry that keeps state per processor (package rdotel's) is given to
// each function at Register instead:
//
//	tel, err := rdotel.New(rdotel.WithConsumerGroup("orders-app"))
//	h.Register("orders", handler, host.WithHooks(tel.Hooks()), host.WithMiddleware(tel.Middleware()))
//
// Bindings are checked when Run starts, before anything runs: a function
// without a trigger, a trigger or a policy in host.json for a function
// that is not registered (with the file's line:column and a suggestion for
// a misspelt name), and two functions that consume one topic in one
// consumer group (the group would split the records between them) are
// errors.
//
// Middleware given to [New] wraps every function; middleware given to
// [Host.Register] wraps that function inside it:
//
//	batch -> host-wide middleware -> function middleware -> handler
//	result <- host-wide middleware <- function middleware <- handler
//
// # HTTP
//
// With [WithHTTP] (off by default; an address without a host listens on
// 127.0.0.1 only) the host serves /healthz, /readyz, a status page and its
// JSON, and the Resume and Skip actions for partitions that
// [stream.StopPartition] stopped, and in share mode for each record it
// stopped, by its offset, as in key ordering for each key it stopped (each
// waits for its outcome at most 10 seconds, and no longer than its
// request); see [Host.Handler]. The operator's CLI reaches the same JSON
// and actions: "redeliver stopped -url URL" lists what is stopped, and
// "redeliver resume" and "redeliver skip" (with -key for a key) release it,
// with the token from $REDELIVER_TOKEN. All but /healthz and
// /readyz answer only to addresses, localhost and the names of
// [WithAllowedHosts] (against DNS rebinding); beyond loopback the actions
// need [WithToken], and Run refuses to serve there without one unless
// [WithUnauthenticatedActions] says otherwise. The page is HTML
// rendered by the host from the standard library, with no build step, and
// reloads itself. With a re-drive store ([WithRedrive]), it also lists each
// function's parked entries, and a function whose policy says onExhausted
// park parks there (without a store, it is an error at start; with
// "ordering": "key", through [redrive.ParkByKey], which keeps each key's
// order through the re-drive); the host
// runs the re-drive's scheduler on that store and completes an entry when a
// function handles its re-driven record ([WithoutScheduler] leaves the
// re-drive to another process). The re-drive's options given to
// [WithRedrive] go to the scheduler and to every function's Park action:
// rdotel's re-drive metrics come from
// host.WithRedrive(store, redrive.WithHooks(tel.RedriveHooks())).
//
// # Shutdown
//
// When ctx is done, /readyz answers 503, every worker's context is
// cancelled, and Run waits up to the drain time ([WithDrain], default
// [DefaultDrain]) for the workers to return. A batch in flight is
// abandoned: its checkpoint is not moved, whatever its handler returns, and
// the partition's next owner delivers it again. Nothing is checkpointed
// because of the shutdown. Run then returns nil: an error only says that
// something failed (a binding, a function's consumer, the drain time).
package host
