package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/checkpoint"
	"github.com/redeliver-go/redeliver/internal/retrystate"
)

// seedGroup produces 10 records to each of the topic's 3 partitions and
// commits, for group: partition 0 at 10 with no metadata, partition 1 at 4
// with the retry state of a batch on its second retry, due in 30s, and
// partition 2 at 7 with another tool's metadata.
func seedGroup(t *testing.T, brokers []string, group, topic string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var recs []*kgo.Record
	for p := range int32(3) {
		for i := range 10 {
			recs = append(recs, &kgo.Record{Topic: topic, Partition: p, Value: fmt.Appendf(nil, "%d", i)})
		}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	state := retrystate.EncodeState(retrystate.State{Offset: 4, Retries: 2, FirstFailure: fixedNow.Add(-5 * time.Minute),
		LastDelay: 2 * time.Second, NextAt: fixedNow.Add(30 * time.Second)})
	var offs kadm.Offsets
	offs.Add(kadm.Offset{Topic: topic, Partition: 0, At: 10, LeaderEpoch: -1})
	offs.Add(kadm.Offset{Topic: topic, Partition: 1, At: 4, LeaderEpoch: -1, Metadata: state})
	offs.Add(kadm.Offset{Topic: topic, Partition: 2, At: 7, LeaderEpoch: -1, Metadata: "kcat"})
	resp, err := kadm.NewClient(cl).CommitOffsets(ctx, group, offs)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
}

// seedStopped commits, for group, the states of records the engine gave up
// on the topic seedGroup filled: partition 0 at 4, a record given up after
// 3 deliveries whose exhaustion action has not succeeded, partition 1 at
// 5, a partition stopped at its record (StopPartition), and partition 2
// at 6, a retry 5 minutes overdue that waited out a minute of outages.
func seedStopped(t *testing.T, brokers []string, group, topic string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	givenUp := retrystate.EncodeState(retrystate.State{Offset: 4, Retries: 2, FirstFailure: fixedNow.Add(-5 * time.Minute), LastDelay: 2 * time.Second,
		Started: true, GivenUp: checkpoint.RetriesSpent, LastError: "timeout; upstream=orders"})
	halted := retrystate.EncodeState(retrystate.State{Offset: 5, Retries: 0, FirstFailure: fixedNow.Add(-time.Hour),
		Started: true, GivenUp: checkpoint.NotRetryable, LastError: "bad payload", Halted: true})
	overdue := retrystate.EncodeState(retrystate.State{Offset: 6, Retries: 1, FirstFailure: fixedNow.Add(-10 * time.Minute), LastDelay: time.Second,
		NextAt: fixedNow.Add(-5 * time.Minute), OutageTime: time.Minute})
	var offs kadm.Offsets
	offs.Add(kadm.Offset{Topic: topic, Partition: 0, At: 4, LeaderEpoch: -1, Metadata: givenUp})
	offs.Add(kadm.Offset{Topic: topic, Partition: 1, At: 5, LeaderEpoch: -1, Metadata: halted})
	offs.Add(kadm.Offset{Topic: topic, Partition: 2, At: 6, LeaderEpoch: -1, Metadata: overdue})
	if resp, err := kadm.NewClient(cl).CommitOffsets(ctx, group, offs); err != nil || resp.Error() != nil {
		t.Fatal(err, resp.Error())
	}
}

// seedKeyed commits, for group, a window of key ordering on partition 0
// of the topic seedGroup filled: committed at 3, record 3 given up with
// its action not done (its key stopped), 4 and 6 finished, 5 retrying
// (retry 2, due in 30s), 7 in flight.
func seedKeyed(t *testing.T, brokers []string, group, topic string) {
	t.Helper()
	w, err := retrystate.NewWindow(3, checkpoint.WindowLimits{})
	if err != nil {
		t.Fatal(err)
	}
	for o := int64(3); o < 8; o++ {
		if err := w.Admit(o); err != nil {
			t.Fatal(err)
		}
	}
	for _, step := range []error{
		w.Finish(4), w.Finish(6),
		w.Retry(5, retrystate.State{Offset: 5, Retries: 2, FirstFailure: fixedNow.Add(-time.Minute), LastDelay: 30 * time.Second, NextAt: fixedNow.Add(30 * time.Second), LastError: "503", Records: 1, Alone: true}),
		w.GiveUp(3, retrystate.State{Offset: 3, Retries: 1, FirstFailure: fixedNow.Add(-10 * time.Minute), Started: true, GivenUp: checkpoint.RetriesSpent, LastError: "bad payload", Records: 1, Alone: true}),
	} {
		if step != nil {
			t.Fatal(step)
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var offs kadm.Offsets
	offs.Add(kadm.Offset{Topic: topic, Partition: 0, At: w.Base(), LeaderEpoch: -1, Metadata: w.Encode()})
	if resp, err := kadm.NewClient(cl).CommitOffsets(ctx, group, offs); err != nil || resp.Error() != nil {
		t.Fatal(err, resp.Error())
	}
}

func kfakeBrokers(t *testing.T, topic string) []string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

// TestOffsetsGolden checks the offsets command's output on kfake against
// testdata/offsets.golden (the broker address replaced by BROKERS).
func TestOffsetsGolden(t *testing.T) {
	brokers := kfakeBrokers(t, "orders")
	seedGroup(t, brokers, "orders-app", "orders")
	seedStopped(t, brokers, "stopped-app", "orders")
	seedKeyed(t, brokers, "keyed-app", "orders")
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"offsets", []string{"offsets", "-brokers", strings.Join(brokers, ","), "-group", "orders-app", "-config", "testdata/app.json", "-function", "orders"}},
		{"offsets_no_config", []string{"offsets", "-group", "orders-app", "-brokers", strings.Join(brokers, ",")}},
		// Given up, stopped, and overdue after outages: what the engine
		// committed, in words and as JSON.
		{"offsets_given_up_stopped", []string{"offsets", "-brokers", strings.Join(brokers, ","), "-group", "stopped-app", "-config", "testdata/app.json", "-function", "orders"}},
		{"offsets_given_up_stopped_json", []string{"offsets", "-json", "-brokers", strings.Join(brokers, ","), "-group", "stopped-app", "-config", "testdata/app.json", "-function", "orders"}},
		// Key ordering: the window, a key stopped at its record and a
		// record retrying, in words and as JSON.
		{"offsets_key_window", []string{"offsets", "-brokers", strings.Join(brokers, ","), "-group", "keyed-app", "-config", "testdata/app.json", "-function", "orders"}},
		{"offsets_key_window_json", []string{"offsets", "-json", "-brokers", strings.Join(brokers, ","), "-group", "keyed-app", "-config", "testdata/app.json", "-function", "orders"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, code := runCLI(tc.args)
			got = strings.ReplaceAll(got, strings.Join(brokers, ","), "BROKERS")
			if code != 0 {
				t.Errorf("exit status %d\n%s", code, got)
			}
			file := filepath.Join("testdata", tc.name+".golden")
			if *update {
				if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				t.Errorf("output differs from %s:\n--- got\n%s--- want\n%s", file, got, want)
			}
		})
	}
}

// TestOffsets runs the offsets command with -json on kfake and, when
// REDELIVER_KAFKA_BROKERS names one, on a real broker.
func TestOffsets(t *testing.T) {
	t.Run("kfake", func(t *testing.T) { testOffsets(t, kfakeBrokers(t, "orders"), "orders") })
	t.Run("broker", func(t *testing.T) {
		env := os.Getenv("REDELIVER_KAFKA_BROKERS")
		if env == "" {
			t.Skip("REDELIVER_KAFKA_BROKERS is not set: no real broker (integration/kafka.sh starts one)")
		}
		brokers := strings.Split(env, ",")
		topic := fmt.Sprintf("redeliver-cli-%d", time.Now().UnixNano())
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		adm := kadm.NewClient(cl)
		if _, err := adm.CreateTopic(ctx, 3, 1, nil, topic); err != nil {
			t.Fatal(err)
		}
		defer adm.DeleteTopics(context.Background(), topic)
		testOffsets(t, brokers, topic)
	})
}

func testOffsets(t *testing.T, brokers []string, topic string) {
	group := topic + "-app"
	seedGroup(t, brokers, group, topic)
	got, code := runCLI([]string{"offsets", "-json", "-brokers", strings.Join(brokers, ","), "-group", group, "-config", "testdata/app.json"})
	if code != 0 {
		t.Fatalf("exit status %d\n%s", code, got)
	}
	body := got[strings.Index(got, "\n")+1 : strings.LastIndex(got, "--- exit")]
	var out struct {
		Partitions []offsetRow `json:"partitions"`
	}
	if err := json.Unmarshal([]byte(body), &out); err != nil {
		t.Fatalf("%v\n%s", err, got)
	}
	if len(out.Partitions) != 3 {
		t.Fatalf("%d partitions, want 3\n%s", len(out.Partitions), got)
	}
	p0, p1, p2 := out.Partitions[0], out.Partitions[1], out.Partitions[2]
	if p0.Committed != 10 || p0.End != 10 || p0.Lag != 0 || p0.Withheld {
		t.Errorf("partition 0 = %+v, want committed 10 of 10, not withheld", p0)
	}
	if p1.Committed != 4 || p1.Lag != 6 || !p1.Withheld || p1.Retries != 2 || p1.MaxRetries == nil || *p1.MaxRetries != 10 ||
		!p1.NextAt.Equal(fixedNow.Add(30*time.Second)) || !p1.FirstFailure.Equal(fixedNow.Add(-5*time.Minute)) || p1.Overdue {
		t.Errorf("partition 1 = %+v, want withheld at 4, retry 2 of 10 due in 30s", p1)
	}
	if p2.Committed != 7 || p2.Withheld || !strings.Contains(p2.State, "another tool") {
		t.Errorf("partition 2 = %+v, want another tool's metadata", p2)
	}
}

// TestOffsetsStateAndMistakes checks that the retry limit and the words of
// a withheld partition come from the state the engine committed (a
// handler's RetryResult replaces the policy's limit; a started retry says
// so), and that an unknown topic or function is an error, exit status 1,
// with a suggestion.
func TestOffsetsStateAndMistakes(t *testing.T) {
	brokers := kfakeBrokers(t, "orders")
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	asked := retrystate.EncodeState(retrystate.State{Offset: 3, Retries: 2, FirstFailure: fixedNow.Add(-time.Minute), LastDelay: 2 * time.Second,
		NextAt: fixedNow.Add(2 * time.Second), Request: retrystate.Request{MaxRetries: 3, Delay: 2 * time.Second}})
	started := retrystate.EncodeState(retrystate.State{Offset: 5, Retries: 1, FirstFailure: fixedNow.Add(-time.Minute), LastDelay: time.Second, Started: true})
	var offs kadm.Offsets
	offs.Add(kadm.Offset{Topic: "orders", Partition: 0, At: 3, LeaderEpoch: -1, Metadata: asked})
	offs.Add(kadm.Offset{Topic: "orders", Partition: 1, At: 5, LeaderEpoch: -1, Metadata: started})
	other := retrystate.EncodeState(retrystate.State{Offset: 6, Retries: 4, FirstFailure: fixedNow.Add(-time.Minute)})
	offs.Add(kadm.Offset{Topic: "orders", Partition: 2, At: 9, LeaderEpoch: -1, Metadata: other})
	if resp, err := kadm.NewClient(cl).CommitOffsets(ctx, "app", offs); err != nil || resp.Error() != nil {
		t.Fatal(err, resp.Error())
	}
	b := strings.Join(brokers, ",")

	got, code := runCLI([]string{"offsets", "-json", "-brokers", b, "-group", "app", "-config", "testdata/app.json", "-function", "orders"})
	if code != 0 {
		t.Fatalf("exit status %d\n%s", code, got)
	}
	body := got[strings.Index(got, "\n")+1 : strings.LastIndex(got, "--- exit")]
	var out struct {
		Partitions []offsetRow `json:"partitions"`
	}
	if err := json.Unmarshal([]byte(body), &out); err != nil || len(out.Partitions) != 3 {
		t.Fatalf("%v: want 3 partitions\n%s", err, got)
	}
	p0, p1 := out.Partitions[0], out.Partitions[1]
	if p0.MaxRetries == nil || *p0.MaxRetries != 3 || p0.RetryResult == nil || p0.RetryResult.MaxRetries != 3 || p0.RetryResult.Delay != "2s" ||
		!strings.Contains(p0.State, "retry 2 of 3 (the handler's RetryResult: 3 retries, 2s apart), due ") {
		t.Errorf("partition 0 = %+v\nwant retry 2 of 3, the limit of the handler's RetryResult, not the policy's 10", p0)
	}
	if !p1.Started || p1.MaxRetries == nil || *p1.MaxRetries != 10 || !strings.Contains(p1.State, "retry 1 of 10, started") {
		t.Errorf("partition 1 = %+v\nwant retry 1 of 10, started", p1)
	}
	// The engine applies a state only to the record it names.
	if p2 := out.Partitions[2]; p2.Withheld || p2.Retries != 0 || p2.State != "retry state of the record at offset 6, not of the one at the checkpoint: ignored, the record at 9 starts its count over" {
		t.Errorf("partition 2 = %+v\nwant the state of another record, ignored", p2)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-topic", "ordres"}, "redeliver offsets: topic ordres does not exist: did you mean orders?"},
		{[]string{"-config", "testdata/app.json", "-function", "paymnts"},
			`redeliver offsets: testdata/app.json names no function "paymnts": did you mean payments? (a function the file does not name runs under the host-wide policy: leave -function out for it)`},
	} {
		got, code := runCLI(append([]string{"offsets", "-brokers", b, "-group", "app"}, tc.args...))
		if code != 1 || !strings.Contains(got, "--- stderr\n"+tc.want+"\n") {
			t.Errorf("exit status %d, want 1 and on stderr:\n%s\ngot:\n%s", code, tc.want, got)
		}
	}
}
