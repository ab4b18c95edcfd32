package hostconfig_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/redeliver-go/redeliver/hostconfig"
)

const triggersDoc = `{
  "version": "2.0",
  "checkpointRetryPolicy": {
    "retryCount": 3,
    "sleepDuration": "00:00:05",
    "functions": {
      "payments": {"retryCount": 1, "onExhausted": "stop"},
    },
  },
  "triggers": {
    "orders": {"type": "kafka", "topic": "orders", "consumerGroup": "orders-app", "maxBatchSize": 100},
    "payments": {"type": "Kafka", "adapter": "kafkago", "topic": "payments", "consumerGroup": "payments-app"},
  },
}`

func TestTriggers(t *testing.T) {
	cfg, err := withEnv("AzureFunctionsJobHost__triggers__orders__consumerGroup=orders-blue").Parse("host.json", []byte(triggersDoc))
	if err != nil {
		t.Fatal(err)
	}
	orders, ok := cfg.Trigger("ORDERS")
	if !ok {
		t.Fatal("no trigger for orders")
	}
	want := hostconfig.Trigger{Function: "orders", Origin: "triggers.orders (host.json:11:15)", Type: "kafka", Adapter: "franz",
		Topic: "orders", ConsumerGroup: "orders-blue", MaxBatchSize: 100, Ordering: "partition"}
	got := orders
	got.Settings = nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("orders = %+v\nwant %+v", got, want)
	}
	wantSettings := []hostconfig.Setting{
		{Field: "type", Value: `"kafka"`, Source: "host.json:11:24"},
		{Field: "topic", Value: `"orders"`, Source: "host.json:11:42"},
		{Field: "consumerGroup", Value: "orders-blue", Source: "environment AzureFunctionsJobHost__triggers__orders__consumerGroup"},
		{Field: "maxBatchSize", Value: "100", Source: "host.json:11:99"},
	}
	if !reflect.DeepEqual(orders.Settings, wantSettings) {
		t.Errorf("orders settings = %+v\nwant %+v", orders.Settings, wantSettings)
	}
	payments, _ := cfg.Trigger("payments")
	if payments.Type != "kafka" || payments.Adapter != "kafkago" || payments.MaxBatchSize != 0 {
		t.Errorf("payments = %+v", payments)
	}
	if _, ok := cfg.Trigger("audit"); ok {
		t.Error("a trigger for audit")
	}

	// The sarama and confluent adapters, by name.
	for _, name := range []string{"sarama", "confluent"} {
		cfg, err := noEnv.Parse("host.json", []byte(`{"triggers": {"f": {"type": "kafka", "adapter": "`+name+`", "topic": "t", "consumerGroup": "g"}}}`))
		if err != nil {
			t.Fatal(err)
		}
		if f, _ := cfg.Trigger("f"); f.Adapter != name || f.ConsumerGroup != "g" {
			t.Errorf("%s trigger = %+v", name, f)
		}
	}

	// Key ordering.
	cfg, err = noEnv.Parse("host.json", []byte(`{"triggers": {"f": {"type": "kafka", "topic": "t", "consumerGroup": "g", "ordering": "Key"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if f, _ := cfg.Trigger("f"); f.Ordering != "key" {
		t.Errorf("ordering %q, want key", f.Ordering)
	}

	// A share group, with the franz adapter by default.
	cfg, err = noEnv.Parse("host.json", []byte(`{"triggers": {"emails": {"type": "kafka", "topic": "emails", "shareGroup": "emails-app"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	emails, _ := cfg.Trigger("emails")
	if emails.ShareGroup != "emails-app" || emails.ConsumerGroup != "" || emails.Adapter != "franz" {
		t.Errorf("emails = %+v, want share group emails-app on the franz adapter", emails)
	}
}

func TestPolicySettings(t *testing.T) {
	cfg, err := withEnv("AzureFunctionsJobHost__checkpointRetryPolicy__retryCount=7").Parse("host.json", []byte(triggersDoc))
	if err != nil {
		t.Fatal(err)
	}
	host := []hostconfig.Setting{
		{Field: "retryCount", Value: "7", Source: "environment AzureFunctionsJobHost__checkpointRetryPolicy__retryCount"},
		{Field: "sleepDuration", Value: `"00:00:05"`, Source: "host.json:5:22"},
	}
	if got := cfg.Settings(""); !reflect.DeepEqual(got, host) {
		t.Errorf("host settings = %+v\nwant %+v", got, host)
	}
	payments := []hostconfig.Setting{
		{Field: "retryCount", Value: "1", Source: "host.json:7:34"},
		{Field: "sleepDuration", Value: `"00:00:05"`, Source: "host.json:5:22", Inherited: true},
		{Field: "onExhausted", Value: `"stop"`, Source: "host.json:7:52"},
	}
	if got := cfg.Settings("Payments"); !reflect.DeepEqual(got, payments) {
		t.Errorf("payments settings = %+v\nwant %+v", got, payments)
	}
	inherited := []hostconfig.Setting{
		{Field: "retryCount", Value: "7", Source: "environment AzureFunctionsJobHost__checkpointRetryPolicy__retryCount", Inherited: true},
		{Field: "sleepDuration", Value: `"00:00:05"`, Source: "host.json:5:22", Inherited: true},
	}
	if got := cfg.Settings("orders"); !reflect.DeepEqual(got, inherited) {
		t.Errorf("orders (no policy of its own) settings = %+v\nwant the host's, inherited", got)
	}
	if got := cfg.Settings(""); !reflect.DeepEqual(got, host) {
		t.Errorf("host settings after a function's = %+v: the host's were changed", got)
	}
}

func TestTriggerErrors(t *testing.T) {
	for _, tc := range []struct{ name, doc, want string }{
		{"not an object", `{"triggers": []}`,
			`host.json:1:14: triggers: want an object of triggers by function name`},
		{"type missing", `{"triggers": {"a": {"topic": "t", "consumerGroup": "g"}}}`,
			`host.json:1:20: triggers.a: type is missing: want kafka`},
		{"unknown type", `{"triggers": {"a": {"type": "kafak", "topic": "t", "consumerGroup": "g"}}}`,
			`host.json:1:29: triggers.a.type: unknown value "kafak": did you mean kafka?: want kafka`},
		{"unknown adapter", `{"triggers": {"a": {"type": "kafka", "adapter": "franzgo", "topic": "t", "consumerGroup": "g"}}}`,
			`host.json:1:49: triggers.a.adapter: unknown value "franzgo": did you mean franz?: want franz or kafkago or sarama or confluent`},
		{"group alias", `{"triggers": {"a": {"type": "kafka", "topic": "t", "group": "g"}}}`,
			"host.json:1:20: triggers.a: consumerGroup is missing: want the consumer group its consumer joins (or shareGroup, to read through a share group)\n" +
				`hostconfig: host.json:1:52: triggers.a: unknown field "group": did you mean consumerGroup?`},
		{"both groups", `{"triggers": {"a": {"type": "kafka", "topic": "t", "consumerGroup": "g", "shareGroup": "s"}}}`,
			`host.json:1:88: triggers.a.shareGroup: a trigger reads through a consumer group or a share group, not both: consumerGroup is also set, at host.json:1:69`},
		{"share group on kafka-go", `{"triggers": {"a": {"type": "kafka", "adapter": "kafkago", "topic": "t", "shareGroup": "s"}}}`,
			`host.json:1:49: triggers.a.adapter: kafka-go has no share-group consumer: a shareGroup trigger needs "adapter": "franz" (the default)`},
		{"share group on sarama", `{"triggers": {"a": {"type": "kafka", "adapter": "sarama", "topic": "t", "shareGroup": "s"}}}`,
			`host.json:1:49: triggers.a.adapter: sarama has no share-group consumer: a shareGroup trigger needs "adapter": "franz" (the default)`},
		{"share group on confluent", `{"triggers": {"a": {"type": "kafka", "adapter": "confluent", "topic": "t", "shareGroup": "s"}}}`,
			`host.json:1:49: triggers.a.adapter: confluent-kafka-go has no share-group consumer: a shareGroup trigger needs "adapter": "franz" (the default)`},
		{"misspelt field", `{"triggers": {"a": {"type": "kafka", "topic": "t", "consumerGroup": "g", "maxBatchSise": 5}}}`,
			`host.json:1:74: triggers.a: unknown field "maxBatchSise": did you mean maxBatchSize?`},
		{"empty topic", `{"triggers": {"a": {"type": "kafka", "topic": " ", "consumerGroup": "g"}}}`,
			`host.json:1:47: triggers.a.topic: empty topic: want the topic the function consumes`},
		// Topic names follow Kafka's rules.
		{"topic with a trailing space", `{"triggers": {"a": {"type": "kafka", "topic": "orders ", "consumerGroup": "g"}}}`,
			`host.json:1:47: triggers.a.topic: "orders ": a Kafka topic name holds only ASCII letters, digits, '.', '_' and '-', not spaces around it`},
		{"topic with a slash", `{"triggers": {"a": {"type": "kafka", "topic": "orders/eu", "consumerGroup": "g"}}}`,
			`host.json:1:47: triggers.a.topic: "orders/eu": a Kafka topic name holds only ASCII letters, digits, '.', '_' and '-', not '/'`},
		{"topic ..", `{"triggers": {"a": {"type": "kafka", "topic": "..", "consumerGroup": "g"}}}`,
			`host.json:1:47: triggers.a.topic: "..": Kafka does not accept it as a topic name`},
		{"topic too long", `{"triggers": {"a": {"type": "kafka", "topic": "` + strings.Repeat("t", 250) + `", "consumerGroup": "g"}}}`,
			`host.json:1:47: triggers.a.topic: "` + strings.Repeat("t", 250) + `" is 250 characters long: a Kafka topic name holds at most 249`},
		{"dead-letter topic with a space", `{"checkpointRetryPolicy": {"retryCount": 0, "onExhausted": {"action": "deadLetter", "topic": "orders dlq"}}}`,
			`host.json:1:94: checkpointRetryPolicy.onExhausted.topic: "orders dlq": a Kafka topic name holds only ASCII letters, digits, '.', '_' and '-', not a space`},
		{"retry topic", `{"redrive": {"retryTopic": "orders-retry\t"}}`,
			`host.json:1:28: redrive.retryTopic: "orders-retry\t": a Kafka topic name holds only ASCII letters, digits, '.', '_' and '-', not spaces around it`},
		{"reply topic", `{"redrive": {"replyTopic": "réponses"}}`,
			`host.json:1:28: redrive.replyTopic: "réponses": a Kafka topic name holds only ASCII letters, digits, '.', '_' and '-', not 'é'`},
		{"topic not a string", `{"triggers": {"a": {"type": "kafka", "topic": ["t"], "consumerGroup": "g"}}}`,
			`host.json:1:47: triggers.a.topic: want a string, the topic the function consumes, got an array`},
		{"batch size 0", `{"triggers": {"a": {"type": "kafka", "topic": "t", "consumerGroup": "g", "maxBatchSize": 0}}}`,
			`host.json:1:90: triggers.a.maxBatchSize: 0: want at least 1 record`},
		{"unknown ordering", `{"triggers": {"a": {"type": "kafka", "topic": "t", "consumerGroup": "g", "ordering": "keys"}}}`,
			`host.json:1:86: triggers.a.ordering: unknown value "keys": did you mean key?: want partition or key or none`},
		{"ordering of a share group", `{"triggers": {"a": {"type": "kafka", "topic": "t", "shareGroup": "s", "ordering": "key"}}}`,
			`host.json:1:83: triggers.a.ordering: a share group acknowledges records one by one and keeps no order: ordering "key" applies to a consumerGroup trigger`},
		{"duplicate function", `{"triggers": {"a": {"type": "kafka", "topic": "t", "consumerGroup": "g"}, "A": {}}}`,
			`host.json:1:75: triggers.A: duplicate function (names ignore case): also at host.json:1:20`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := noEnv.Parse("host.json", []byte(tc.doc))
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.HasPrefix(err.Error(), "hostconfig: "+tc.want) {
				t.Errorf("error =\n%v\nwant it to start with\nhostconfig: %s", err, tc.want)
			}
		})
	}
}

// A topic set by an environment value is checked as the file's is (a
// trailing space is a common slip there), and a group name with spaces
// around it is kept as Kafka takes it, with a warning.
func TestTopicFromEnvironmentAndGroupSpaces(t *testing.T) {
	doc := `{"checkpointRetryPolicy": {"retryCount": 0, "onExhausted": {"action": "deadLetter", "topic": "dlq"}},
  "triggers": {"a": {"type": "kafka", "topic": "t", "consumerGroup": "g"}}}`
	_, err := withEnv("AzureFunctionsJobHost__triggers__a__topic=orders ", "AzureFunctionsJobHost__checkpointRetryPolicy__onExhausted__topic=dlq ").Parse("host.json", []byte(doc))
	checkProblems(t, err, []string{
		`environment AzureFunctionsJobHost__checkpointRetryPolicy__onExhausted__topic: checkpointRetryPolicy.onExhausted.topic: "dlq ": a Kafka topic name holds only ASCII letters, digits, '.', '_' and '-', not spaces around it`,
		`environment AzureFunctionsJobHost__triggers__a__topic: triggers.a.topic: "orders ": a Kafka topic name holds only ASCII letters, digits, '.', '_' and '-', not spaces around it`,
	})
	cfg, err := withEnv("AzureFunctionsJobHost__triggers__a__consumerGroup=orders-app ").Parse("host.json", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if g := cfg.Triggers["a"].ConsumerGroup; g != "orders-app " {
		t.Errorf("ConsumerGroup = %q, want it as written", g)
	}
	want := []string{`environment AzureFunctionsJobHost__triggers__a__consumerGroup: consumerGroup "orders-app " has spaces around it: Kafka takes it as written, a group other than "orders-app"`}
	if !reflect.DeepEqual(cfg.Warnings, want) {
		t.Errorf("Warnings = %q\nwant %q", cfg.Warnings, want)
	}
}

// TestTriggerFromEnvironmentNearMiss checks that an override of a field
// of a trigger the file does not have, named almost like one it has, is
// one problem that names the trigger meant, not a new trigger's missing
// type and group; and that a whole trigger from the environment still
// loads.
func TestTriggerFromEnvironmentNearMiss(t *testing.T) {
	_, err := withEnv("AzureFunctionsJobHost__triggers__ordres__consumerGroup=orders-blue").Parse("host.json", []byte(triggersDoc))
	checkProblems(t, err, []string{
		`environment AzureFunctionsJobHost__triggers__ordres__consumerGroup: triggers.ordres: the file has no trigger for function "ordres": did you mean orders? (a variable for a field of a trigger needs the function's name as the file spells it, ignoring case)`})
	cfg, err := withEnv("AzureFunctionsJobHost__triggers__ordres__type=kafka", "AzureFunctionsJobHost__triggers__ordres__topic=o",
		"AzureFunctionsJobHost__triggers__ordres__consumerGroup=g").Parse("host.json", []byte(triggersDoc))
	if err != nil {
		t.Fatal(err)
	}
	if tr, ok := cfg.Trigger("ordres"); !ok || tr.Topic != "o" {
		t.Fatalf("trigger ordres = %+v, %v: want the one the environment gives", tr, ok)
	}
}

func TestTriggersSectionNearMiss(t *testing.T) {
	_, err := noEnv.Parse("host.json", []byte(`{"trigers": {}}`))
	checkProblems(t, err, []string{`host.json:1:2: "trigers" is not a section redeliver reads: did you mean triggers?`})
}

func TestCheckFunctions(t *testing.T) {
	cfg, err := noEnv.Parse("host.json", []byte(triggersDoc))
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.CheckFunctions([]string{"Orders", "payments"}); err != nil {
		t.Errorf("CheckFunctions(orders, payments) = %v", err)
	}
	err = cfg.CheckFunctions([]string{"order", "audit"})
	want := `hostconfig: host.json:7:7: checkpointRetryPolicy.functions.payments: a policy for function "payments", which the host does not run: its functions are order, audit
hostconfig: host.json:11:5: triggers.orders: a trigger for function "orders", which the host does not run: did you mean order?
hostconfig: host.json:12:5: triggers.payments: a trigger for function "payments", which the host does not run: its functions are order, audit`
	if err == nil || err.Error() != want {
		t.Errorf("CheckFunctions(order, audit) =\n%v\nwant\n%s", err, want)
	}
	var p *hostconfig.Problem
	if !errors.As(err, &p) || p.Line != 7 || p.Col != 7 {
		t.Errorf("errors.As(*Problem) = %+v, want line 7 col 7", p)
	}
}

// FunctionNames lists each function the file names once, whether in a
// policy, a trigger or both, names matching case-insensitively.
func TestFunctionNames(t *testing.T) {
	cfg, err := noEnv.Parse("host.json", []byte(`{
  "checkpointRetryPolicy": {"retryCount": 0, "functions": {"Payments": {}, "audit": {}}},
  "triggers": {
    "payments": {"type": "kafka", "topic": "payments", "consumerGroup": "g"},
    "orders": {"type": "kafka", "topic": "orders", "consumerGroup": "g"}
  }
}`))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := cfg.FunctionNames(), []string{"audit", "orders", "Payments"}; !reflect.DeepEqual(got, want) {
		t.Errorf("FunctionNames() = %q, want %q", got, want)
	}
}
