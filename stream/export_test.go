package stream

// RetryRequestOf is retryRequestOf, for the tests of package stream_test.
var RetryRequestOf = retryRequestOf
