package stream

import "fmt"

// PublishError is what a [Publisher] returns when it knows, record by
// record, which records of a Publish call the broker acknowledged: some
// were written and some not (say, one partition's leader was away). Errs
// holds one error per record, in the order given: nil for a record that
// was acknowledged, the reason for one that was not.
//
// A caller that must not publish a record twice (the re-drive's scheduler)
// publishes again only the records that failed. A Publisher that cannot
// tell returns a plain error, and then no record of the call counts as
// written: one that was written all the same is published again.
type PublishError struct {
	Errs []error
}

// Written reports whether the record at index i was acknowledged.
func (e *PublishError) Written(i int) bool {
	return i >= 0 && i < len(e.Errs) && e.Errs[i] == nil
}

// Failed returns the number of records not acknowledged.
func (e *PublishError) Failed() int {
	n := 0
	for _, err := range e.Errs {
		if err != nil {
			n++
		}
	}
	return n
}

func (e *PublishError) Error() string {
	for _, err := range e.Errs {
		if err != nil {
			return fmt.Sprintf("%d of %d records not published: %v", e.Failed(), len(e.Errs), err)
		}
	}
	return fmt.Sprintf("all %d records published", len(e.Errs))
}

// Unwrap returns the errors of the records that failed, so that
// [errors.Is] and [errors.As] match any of them.
func (e *PublishError) Unwrap() []error {
	var out []error
	for _, err := range e.Errs {
		if err != nil {
			out = append(out, err)
		}
	}
	return out
}
