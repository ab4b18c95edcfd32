// Package hostconfig reads the retry configuration of a host.json, as Azure
// Functions users write it, and turns it into a [checkpoint.Policy] and
// [stream.Processor] options.
//
//	cfg, err := hostconfig.Load("host.json") // errors name file:line:col and the field
//	opts, err := cfg.Options(pub)            // the policy and the exhaustion action; pub for deadLetter
//	proc, err := stream.NewProcessor(handler, opts...)
//	fmt.Println(cfg.Explain())               // the policy in words, with its schedule
//
// A host.json is JSON with // and /* */ comments and trailing commas. Of its
// sections, hostconfig reads these and ignores the others (logging,
// extensions, functionTimeout, ...):
//
//   - version: "2.0" when present.
//   - checkpointRetryPolicy: the checkpoint retry proposal's retryCount and
//     sleepDuration, and redeliver's extensions: a strategy naming any delay
//     algorithm with its parameters, maxDelay, maxRetryTime, maxRecordAge,
//     onExhausted (skip, deadLetter with a topic, stop, or park), and functions,
//     one policy per function name, each inheriting the settings it does not
//     set.
//   - retry: Azure Functions' own policy (fixedDelay or exponentialBackoff).
//     When checkpointRetryPolicy also sets a host-wide policy, it wins and
//     [Config.Warnings] says so.
//   - triggers: by function name, what starts each function of a host: a
//     Kafka topic and consumer group, the adapter (franz, kafkago, sarama or confluent) and
//     the most records a batch holds. [Config.CheckFunctions] checks the
//     names against the functions a host runs.
//   - redrive: the scheduled re-drive of parked records ([Redrive]); its
//     store names the environment variable holding the database's
//     connection string, which is never written in the file.
//   - outageBudget: an outage budget for each processor ([OutageBudget]).
//   - statusPage: the host names a host's status page answers to besides
//     loopback names and addresses ([StatusPage]).
//
// [Config.Settings] and [Trigger.Settings] say where each value in force
// was written: the file's line:column or the environment variable;
// [Config.Explain] says it in words.
//
// Keys match case-insensitively, as in Azure Functions. Intervals are .NET
// TimeSpan text or Go durations (see [ParseDuration]). Environment variables
// named AzureFunctionsJobHost__section__key override the file (see
// [DefaultEnvPrefix]; [Loader.EnvPrefix] sets another prefix,
// [Loader.Environ] injects the environment in tests). A variable that looks
// like an override but is not one is named in a warning.
//
// A key spelt almost like a section redeliver reads (checkpointRetryPolcy)
// is an error, not a warning: loaded as written, the section it meant would
// be missing. Print [Config.Warnings] at start-up: they are the only report
// of what was read but is not in force, such as an environment variable
// with a misspelt prefix.
//
// retryCount counts retries, not attempts: 10 delivers a batch at most 11
// times; -1 retries forever, 0 never.
//
// Bad input never panics and never falls back to a default silently: the
// loaders return an [*Error] listing every [Problem], each with the file,
// line:column (or the environment variable), the JSON path and what was
// expected:
//
//	hostconfig: host.json:7:21: checkpointRetryPolicy.sleepDuration: "00:00:60": seconds: 60 is out of range: want 0 to 59
//
// [Config.Explain] describes the policies in words, with the delays before
// the first retries and the worst-case total waiting time.
//
// The strategies, with their parameters (defaults in parentheses; those
// without a default are required):
//
//	fixed                delay
//	immediate
//	linear               initialDelay                       initialDelay * n
//	exponential          initialDelay                       initialDelay * 2^(n-1)
//	exponentialJitter    initialDelay, jitterPercent (5)    lengthened by up to jitterPercent %
//	random               initialDelay                       a random time below initialDelay
//	fullJitter           initialDelay, maxDelay (none)      a random time below min(initialDelay * 2^(n-1), maxDelay)
//	decorrelatedJitter   initialDelay, maxDelay (none)      a random time between initialDelay and 3 * the previous delay
//	jitteredExponential  initialDelay (100ms), minDelay (100ms), maxDelay (10s), jitterDown (0.5), jitterUp (0.25)
//	fixedDelay           delayInterval                      Azure Functions
//	exponentialBackoff   minimumInterval, maximumInterval   Azure Functions
//	azureIotJava         initialDelay (100ms), minDelay (100ms), maxDelay (10s), firstFastRetry (true)
//	backoffAlgorithm     initialDelay, maxDelay             AWS IoT backoffAlgorithm, whole milliseconds up to 65.535s
//	azureIotCImmediate, azureIotCInterval, azureIotCLinearBackoff, azureIotCExponentialBackoff,
//	azureIotCExponentialBackoffWithJitter, azureIotCRandom
//	                     initialDelay, maxDelay, jitterPercent where the C SDK has them, with its defaults
//
// exponentialBackoff and the strategies after it reproduce the SDKs' released
// code through the presets of package checkpoint
// ([checkpoint.AzureFunctionsExponentialBackoff], [checkpoint.AzureIoTJava],
// [checkpoint.BackoffAlgorithm], [checkpoint.AzureIoTC]), with the SDKs'
// defaults; only their delays are used: retryCount and the limits come from
// the policy.
package hostconfig
