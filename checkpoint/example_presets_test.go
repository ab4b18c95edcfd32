package checkpoint_test

import (
	"fmt"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
)

// fixedU is a Rand that always returns the same number: it shows a preset's
// schedule at one point of its random range.
type fixedU float64

func (u fixedU) Float64() float64 { return float64(u) }

// The Azure IoT Java SDK's default policy. With U = 0.5 the jitter J, drawn
// by nextInt(40) + 80, is 100ms: retry n waits min(100ms + (2^(n-1)-1)*100ms,
// 10s), after an immediate first retry.
func ExampleNewAzureIoTJava() {
	p, err := checkpoint.NewAzureIoTJava().Policy()
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(p.MaxRetries, p.MaxRetryTime)
	fmt.Println(p.Schedule(9, fixedU(0.5)))
	fmt.Println(p.Schedule(9, fixedU(0))) // J = 80ms
	// Output:
	// 2147483647 4m0s
	// [0s 200ms 400ms 800ms 1.6s 3.2s 6.4s 10s 10s]
	// [0s 180ms 340ms 660ms 1.3s 2.58s 5.14s 10s 10s]
}

// A custom ExponentialBackoffWithJitter(5, 1000, 60000, 500, false): no fast
// first retry, so the first retry waits minBackoff.
func ExampleAzureIoTJava() {
	j := checkpoint.NewAzureIoTJava()
	j.RetryCount, j.MinBackoff, j.MaxBackoff, j.DeltaBackoff = 5, time.Second, time.Minute, 500*time.Millisecond
	j.FirstFastRetry = false
	p, err := j.Policy()
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(p.Schedule(10, fixedU(0.5)))
	// Output:
	// [1s 1.5s 2.5s 4.5s 8.5s]
}

// The AWS backoffAlgorithm with the values of its MQTT demos: base 500ms,
// cap 5000ms, 5 retries. Each wait is randomValue % (window+1) ms, the window
// doubling from 500 to 4000 and then set to 5000.
func ExampleBackoffAlgorithm() {
	p, err := checkpoint.BackoffAlgorithm{BackOffBase: 500 * time.Millisecond, MaxBackOff: 5000 * time.Millisecond, MaxAttempts: 5}.Policy()
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(p.MaxRetries)
	// randomValue = floor(U * 2^32) = 2^32 - 1: the top of the range.
	fmt.Println(p.Schedule(10, fixedU(0.9999999999999999)))
	// randomValue = 2^31.
	fmt.Println(p.Schedule(10, fixedU(0.5)))
	// Output:
	// 5
	// [6ms 619ms 885ms 1.822s 3.474s]
	// [254ms 310ms 443ms 2.912s 4.238s]
}

// The Azure IoT C SDK's default policy, EXPONENTIAL_BACKOFF_WITH_JITTER with
// retry_control_create's defaults: an immediate first retry, then 1, 2, 4, 8,
// 16 and 30 seconds (the 30-second cap), plus up to 5% truncated to whole
// seconds.
func ExampleNewAzureIoTC() {
	c := checkpoint.NewAzureIoTC(checkpoint.AzureIoTCRetryExponentialBackoffWithJitter, 0)
	p, err := c.Policy()
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(p.Schedule(9, fixedU(0)))
	fmt.Println(p.Schedule(9, fixedU(0.9999999999999999)))
	// Output:
	// [0s 1s 2s 4s 8s 16s 30s 30s 30s]
	// [0s 1s 2s 4s 8s 16s 31s 31s 31s]
}

// Azure Functions' exponentialBackoff with minimumInterval 00:00:02 and
// maximumInterval 00:01:00: the minimum, then the minimum plus a doubling
// increment of 2s * R, R in [0.8, 1.2), until the maximum.
func ExampleAzureFunctionsExponentialBackoff() {
	p, err := checkpoint.AzureFunctionsExponentialBackoff{MaxRetryCount: 8, MinimumInterval: 2 * time.Second, MaximumInterval: time.Minute}.Policy()
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(p.Schedule(10, fixedU(0.5))) // R = 1
	fmt.Println(p.Schedule(10, fixedU(0)))   // R = 0.8
	// Output:
	// [2s 4s 6s 10s 18s 34s 1m0s 1m0s]
	// [2s 3.6s 5.2s 8.4s 14.8s 27.6s 53.2s 1m0s]
}

// The WebJobs strategy with an increment of 500ms apart from its 1s minimum.
// It has no retry count of its own, so its Policy retries forever.
func ExampleWebJobsRandomizedExponentialBackoff() {
	w := checkpoint.WebJobsRandomizedExponentialBackoff{
		MinimumInterval: time.Second, MaximumInterval: 10 * time.Second, DeltaBackoff: 500 * time.Millisecond,
	}
	p, err := w.Policy()
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(p.MaxRetries == checkpoint.Infinite)
	fmt.Println(p.Schedule(8, fixedU(0.5))) // R = 1
	// Output:
	// true
	// [1s 1.5s 2s 3s 5s 9s 10s 10s]
}
