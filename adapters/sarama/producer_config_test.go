package sarama

import (
	"testing"

	"github.com/IBM/sarama"
)

// TestProducerConfig: the producer of WithPublisher waits for every
// in-sync replica and returns what a SyncProducer needs, whatever the
// consumer's configuration says, makes no transactions, and is idempotent
// when the configuration allows it (not before Kafka 0.11, nor without
// retries).
func TestProducerConfig(t *testing.T) {
	for _, tc := range []struct {
		name       string
		set        func(*sarama.Config)
		idempotent bool
	}{
		{"defaults", func(*sarama.Config) {}, true},
		{"producer settings the consumer's config has", func(c *sarama.Config) {
			c.Producer.RequiredAcks = sarama.NoResponse
			c.Producer.Return.Errors = false
			c.Producer.Idempotent = false
		}, true},
		{"Kafka before 0.11", func(c *sarama.Config) { c.Version = sarama.V0_10_2_0 }, false},
		{"no retries", func(c *sarama.Config) { c.Producer.Retry.Max = 0 }, false},
		{"a transactional ID", func(c *sarama.Config) {
			c.Producer.Idempotent, c.Net.MaxOpenRequests, c.Producer.RequiredAcks = true, 1, sarama.WaitForAll
			c.Producer.Transaction.ID = "tx"
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := sarama.NewConfig()
			tc.set(c)
			pc, err := producerConfig(c)
			if err != nil {
				t.Fatal(err)
			}
			if pc == c {
				t.Fatal("the consumer's configuration is changed")
			}
			if pc.Producer.RequiredAcks != sarama.WaitForAll || !pc.Producer.Return.Successes || !pc.Producer.Return.Errors || pc.Producer.Transaction.ID != "" {
				t.Errorf("acks %v, successes %v, errors %v, transaction %q", pc.Producer.RequiredAcks, pc.Producer.Return.Successes, pc.Producer.Return.Errors, pc.Producer.Transaction.ID)
			}
			if pc.Producer.Idempotent != tc.idempotent || tc.idempotent && pc.Net.MaxOpenRequests != 1 {
				t.Errorf("idempotent %v with %d open requests, want idempotent %v", pc.Producer.Idempotent, pc.Net.MaxOpenRequests, tc.idempotent)
			}
		})
	}
}
