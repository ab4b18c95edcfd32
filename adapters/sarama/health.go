package sarama

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/IBM/sarama"

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

// health reports what the consumer knows to be wrong now, or nil.
func (e *engine) health() error {
	return errors.Join(append([]error{e.checks.Err()}, e.fetches.Errs(time.Now(), "sarama", "consuming")...)...)
}

// check is the start check: one metadata request for the group's topics,
// to the first broker that answers, and beside it the check of the
// dead-letter topic: through its publisher's client (which may write to
// another cluster), or through the group's brokers for a publisher given
// with WithPublisher.
func (e *engine) check(ctx context.Context) []health.Problem {
	dl := e.cfg.deadLetterCheck
	if topic := e.cfg.deadLetterTopic; topic != "" {
		dl = func(ctx context.Context) []health.Problem {
			res, err := e.askBrokers(ctx, []string{topic})
			if err != nil {
				return []health.Problem{health.DeadLetterUnreachable("sarama", err)}
			}
			return topicProblems(res, []string{topic}, "dead-letter")
		}
	}
	return kafkaadapter.CheckBeside(ctx, e.checkTopics, dl)
}

// checkTopics asks the group's brokers about the group's topics.
func (e *engine) checkTopics(ctx context.Context) []health.Problem {
	res, err := e.askBrokers(ctx, e.cfg.topics)
	if err != nil {
		return []health.Problem{health.Unreachable("sarama", err)}
	}
	return topicProblems(res, e.cfg.topics, "consumed")
}

// askBrokers asks the group's brokers, one after the other until one
// answers, about topics, on a connection of its own.
func (e *engine) askBrokers(ctx context.Context, topics []string) (*sarama.MetadataResponse, error) {
	conf := *e.cfg.sarama
	conf.Net.DialTimeout, conf.Net.ReadTimeout, conf.Net.WriteTimeout = checkTimeout, checkTimeout, checkTimeout
	var err error
	for _, addr := range e.cfg.brokers {
		b := sarama.NewBroker(addr)
		var res *sarama.MetadataResponse
		res, err = metadata(ctx, b, &conf, topics)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			continue
		}
		return res, nil
	}
	return nil, err
}

// metadata opens b with conf if it is not open, asks it about topics
// without asking it to create them, and closes it again if it opened it.
// It returns when ctx ends, leaving the request to sarama's timeouts.
func metadata(ctx context.Context, b *sarama.Broker, conf *sarama.Config, topics []string) (*sarama.MetadataResponse, error) {
	type answer struct {
		res *sarama.MetadataResponse
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		opened := false
		if ok, _ := b.Connected(); !ok {
			if err := b.Open(conf); err != nil && !errors.Is(err, sarama.ErrAlreadyConnected) {
				ch <- answer{err: err}
				return
			}
			opened = true
		}
		req := sarama.NewMetadataRequest(conf.Version, topics)
		req.AllowAutoTopicCreation = false
		res, err := b.GetMetadata(req)
		if opened {
			_ = b.Close()
		}
		ch <- answer{res, err}
	}()
	select {
	case a := <-ch:
		return a.res, a.err
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// topicProblems are the problems of topics (in role "consumed" or
// "dead-letter") that res says are not there or may not be used.
func topicProblems(res *sarama.MetadataResponse, topics []string, role string) []health.Problem {
	var ps []health.Problem
	for _, name := range slices.Sorted(slices.Values(topics)) {
		var err error = kafkaError{sarama.ErrUnknownTopicOrPartition}
		for _, t := range res.Topics {
			if t != nil && t.Name == name {
				err = nil
				if t.Err != sarama.ErrNoError {
					err = kafkaError{t.Err}
				}
			}
		}
		if err != nil {
			ps = append(ps, health.Topic("sarama", name, role, err))
		}
	}
	return ps
}

// kafkaError is an error code a broker answered, named as Kafka names it
// (sarama's text for it does not name it).
type kafkaError struct{ code sarama.KError }

var kafkaErrorNames = map[sarama.KError]string{
	sarama.ErrUnknownTopicOrPartition:    "UNKNOWN_TOPIC_OR_PARTITION",
	sarama.ErrLeaderNotAvailable:         "LEADER_NOT_AVAILABLE",
	sarama.ErrInvalidTopic:               "INVALID_TOPIC_EXCEPTION",
	sarama.ErrTopicAuthorizationFailed:   "TOPIC_AUTHORIZATION_FAILED",
	sarama.ErrClusterAuthorizationFailed: "CLUSTER_AUTHORIZATION_FAILED",
}

func (k kafkaError) Error() string {
	if name, ok := kafkaErrorNames[k.code]; ok {
		return fmt.Sprintf("%s (%d): %v", name, int16(k.code), k.code)
	}
	return fmt.Sprintf("error code %d: %v", int16(k.code), k.code)
}

func (k kafkaError) Unwrap() error { return k.code }
