package confluent

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/redeliver-go/redeliver/adapters/internal/kafkaadapter"
	"github.com/redeliver-go/redeliver/internal/health"
)

// How Run checks at start that the brokers answer and the topics exist:
// each check waits at most checkTimeout, and checks follow every
// checkInterval until one finds nothing wrong.
const (
	checkTimeout  = 5 * time.Second
	checkInterval = 2 * time.Second
)

// check is the start check: the group's topics, asked through an admin
// client of its own on the consumer's configuration, and beside it the
// dead-letter topic, through its publisher.
//
// The dead-letter topic of a publisher given with WithPublisher is asked
// about through the consumer's brokers, as the group's topics are.
func (e *engine) check(ctx context.Context) []health.Problem {
	dl := e.cfg.deadLetterCheck
	if topic := e.cfg.deadLetterTopic; topic != "" {
		dl = func(ctx context.Context) []health.Problem {
			errs, err := e.askTopics(ctx, []string{topic})
			if err != nil {
				return []health.Problem{health.DeadLetterUnreachable("confluent", err)}
			}
			if errs[topic] != nil {
				return []health.Problem{health.Topic("confluent", topic, "dead-letter", errs[topic])}
			}
			return nil
		}
	}
	return kafkaadapter.CheckBeside(ctx, e.checkTopics, dl)
}

// metadataFunc asks a client about one topic, within timeoutMs.
type metadataFunc func(topic *string, allTopics bool, timeoutMs int) (*kafka.Metadata, error)

// topicMetadata asks get about each topic; it returns when ctx ends,
// leaving the requests to their timeout. after, when not nil, is called
// once the requests are done (whether or not topicMetadata has returned):
// it closes what get uses.
func topicMetadata(ctx context.Context, get metadataFunc, topics []string, after func()) (map[string]error, error) {
	type answer struct {
		errs map[string]error
		err  error
	}
	timeout := checkTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(d), time.Millisecond)
	}
	ch := make(chan answer, 1)
	go func() {
		if after != nil {
			defer after()
		}
		errs := make(map[string]error, len(topics))
		for _, t := range topics {
			md, err := get(&t, false, int(timeout/time.Millisecond))
			if err != nil {
				ch <- answer{err: err}
				return
			}
			errs[t] = kafkaError{kafka.ErrUnknownTopicOrPart}
			if tm, ok := md.Topics[t]; ok {
				errs[t] = nil
				if tm.Error.Code() != kafka.ErrNoError {
					errs[t] = kafkaError{tm.Error.Code()}
				}
			}
		}
		ch <- answer{errs: errs}
	}()
	select {
	case a := <-ch:
		return a.errs, a.err
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// checkTopics checks the group's topics.
func (e *engine) checkTopics(ctx context.Context) []health.Problem {
	errs, err := e.askTopics(ctx, e.cfg.topics)
	if err != nil {
		return []health.Problem{health.Unreachable("confluent", err)}
	}
	var ps []health.Problem
	for _, t := range slices.Sorted(slices.Values(e.cfg.topics)) {
		if errs[t] != nil {
			ps = append(ps, health.Topic("confluent", t, "consumed", errs[t]))
		}
	}
	return ps
}

// askTopics asks about topics through an admin client of its own on the
// consumer's configuration.
func (e *engine) askTopics(ctx context.Context, topics []string) (map[string]error, error) {
	conf := kafka.ConfigMap{}
	for k, v := range e.cfg.conf {
		switch k {
		case "group.id", "enable.auto.commit", "enable.auto.offset.store", "auto.offset.reset", "isolation.level",
			"session.timeout.ms", "heartbeat.interval.ms", "partition.assignment.strategy", "group.instance.id",
			"fetch.wait.max.ms", "enable.partition.eof", "max.poll.interval.ms", "auto.commit.interval.ms",
			"fetch.min.bytes", "fetch.max.bytes", "max.partition.fetch.bytes", "queued.min.messages", "group.protocol":
			continue // consumer properties an admin client refuses
		}
		conf[k] = v
	}
	adm, err := kafka.NewAdminClient(&conf)
	if err != nil {
		return nil, err
	}
	return topicMetadata(ctx, adm.GetMetadata, topics, adm.Close)
}

// kafkaError is an error code a broker answered, named as Kafka names it.
type kafkaError struct{ code kafka.ErrorCode }

var kafkaErrorNames = map[kafka.ErrorCode]string{
	kafka.ErrUnknownTopicOrPart:       "UNKNOWN_TOPIC_OR_PARTITION",
	kafka.ErrUnknownTopic:             "UNKNOWN_TOPIC_OR_PARTITION",
	kafka.ErrLeaderNotAvailable:       "LEADER_NOT_AVAILABLE",
	kafka.ErrTopicAuthorizationFailed: "TOPIC_AUTHORIZATION_FAILED",
}

func (k kafkaError) Error() string {
	if name, ok := kafkaErrorNames[k.code]; ok {
		return fmt.Sprintf("%s (%d): %v", name, int(k.code), k.code)
	}
	return fmt.Sprintf("error code %d: %v", int(k.code), k.code)
}

func (k kafkaError) Unwrap() error { return kafka.NewError(k.code, k.code.String(), false) }
