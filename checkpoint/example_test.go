package checkpoint_test

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
)

func ExampleFixed() {
	p := checkpoint.Policy{MaxRetries: 3, Backoff: checkpoint.Fixed(5 * time.Second)}
	fmt.Println(p.Schedule(10, nil))
	// Output: [5s 5s 5s]
}

func ExampleExponential() {
	p := checkpoint.Policy{MaxRetries: 5, Backoff: checkpoint.Exponential(time.Second)}
	fmt.Println(p.Schedule(10, nil))
	// Output: [1s 2s 4s 8s 16s]
}

// MaxDelay caps every delay of a policy, whatever its backoff or an
// error's retry-after hint asks for.
func ExamplePolicy_maxDelay() {
	p := checkpoint.Policy{MaxRetries: checkpoint.Infinite, Backoff: checkpoint.Exponential(time.Second), MaxDelay: 30 * time.Second}
	fmt.Println(p.Schedule(7, nil))
	// Output: [1s 2s 4s 8s 16s 30s 30s]
}

// Capped stops a growing backoff at a ceiling of its own.
func ExampleCapped() {
	b := checkpoint.Capped(10*time.Second, checkpoint.Exponential(time.Second))
	for n := 1; n <= 6; n++ {
		fmt.Print(b(n, 0, nil), " ")
	}
	// Output: 1s 2s 4s 8s 10s 10s
}

// The AWS "full jitter" backoff, random(0, min(10s, 1s*2^(n-1))): each delay
// is a uniform pick below the capped exponential delay. A seeded source makes
// jitter reproducible.
func ExampleFullJitter() {
	b := checkpoint.FullJitter(checkpoint.Capped(10*time.Second, checkpoint.Exponential(time.Second)))
	p := checkpoint.Policy{MaxRetries: 6, Backoff: b}
	for _, d := range p.Schedule(6, rand.New(rand.NewPCG(1, 2))) {
		fmt.Print(d.Round(time.Millisecond), " ")
	}
	// Output: 676ms 923ms 2.034s 3.438s 7.978s 3.884s
}

// Decorrelated jitter with a ceiling, min(20s, random(1s, 3*prev)): the
// Policy passes each delay it used as the next retry's prev.
func ExampleDecorrelatedJitter() {
	b := checkpoint.Capped(20*time.Second, checkpoint.DecorrelatedJitter(time.Second))
	p := checkpoint.Policy{MaxRetries: 6, Backoff: b}
	for _, d := range p.Schedule(6, rand.New(rand.NewPCG(1, 2))) {
		fmt.Print(d.Round(time.Millisecond), " ")
	}
	// Output: 2.353s 3.795s 6.282s 8.67s 20s 20s
}

// The formula of the Azure IoT Java SDK's retry guide, with J at the middle
// of its range (U = 0.5: J = 50ms + 0.5*75ms = 87.5ms).
func ExampleJitteredExponential() {
	b := checkpoint.JitteredExponential{
		Delta: 100 * time.Millisecond, Min: 100 * time.Millisecond, Max: 10 * time.Second,
		JitterDown: 0.5, JitterUp: 0.25,
	}.Backoff()
	for n := 1; n <= 5; n++ {
		fmt.Print(b(n, 0, fixedU(0.5)), " ")
	}
	// Output: 100ms 187.5ms 362.5ms 712.5ms 1.4125s
}
