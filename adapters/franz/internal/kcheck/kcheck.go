// Package kcheck is the start check of the franz-go consumers (package
// franz and its share consumer): do the brokers answer, do the topics
// exist.
package kcheck

import (
	"context"
	"regexp"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/redeliver-go/redeliver/internal/health"
)

// Topic is a topic to check and its role: "consumed" or "dead-letter".
type Topic struct {
	Name, Role string
}

// Consumed returns the topics cl consumes by name (none when it consumes
// by regular expression).
func Consumed(cl *kgo.Client) []Topic {
	if regex, _ := cl.OptValue(kgo.ConsumeRegex).(bool); regex {
		return nil
	}
	m, _ := cl.OptValue(kgo.ConsumeTopics).(map[string]*regexp.Regexp)
	var ts []Topic
	for name := range m {
		ts = append(ts, Topic{name, "consumed"})
	}
	return ts
}

// Check sends one metadata request for topics through cl, never asking to
// create one, and returns what it finds wrong: brokers that do not answer,
// topics that do not exist or may not be used. pkg prefixes the errors.
func Check(ctx context.Context, cl *kgo.Client, pkg string, topics []Topic) []health.Problem {
	return check(ctx, cl, pkg, topics, health.Unreachable)
}

// DeadLetter checks the dead-letter topic of a publisher whose client, cl,
// is not the consumer's (it may reach another cluster), as Check does.
func DeadLetter(ctx context.Context, cl *kgo.Client, pkg, topic string) []health.Problem {
	return check(ctx, cl, pkg, []Topic{{topic, "dead-letter"}}, health.DeadLetterUnreachable)
}

func check(ctx context.Context, cl *kgo.Client, pkg string, topics []Topic, unreachable func(string, error) health.Problem) []health.Problem {
	topics = slices.Clone(topics)
	slices.SortFunc(topics, func(a, b Topic) int { return strings.Compare(a.Name, b.Name) })
	req := kmsg.NewPtrMetadataRequest()
	req.AllowAutoTopicCreation = false
	req.Topics = []kmsg.MetadataRequestTopic{} // none: only the brokers, when no topic is named
	for _, t := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t.Name)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return []health.Problem{unreachable(pkg, err)}
	}
	var ps []health.Problem
	for _, t := range topics {
		for _, rt := range resp.Topics {
			if rt.Topic == nil || *rt.Topic != t.Name {
				continue
			}
			if err := kerr.ErrorForCode(rt.ErrorCode); err != nil {
				ps = append(ps, health.Topic(pkg, t.Name, t.Role, err))
			}
		}
	}
	return ps
}
