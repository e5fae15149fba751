package scan

import (
	"errors"
	"fmt"
	"testing"
)

func TestErrorClasses(t *testing.T) {
	bad := errors.New("key output.layout: want nxtomo or cxi")
	failed := errors.New("disk full")
	usage, incomplete := Usage(bad), Incomplete(errors.New("interrupted while waiting"))
	for _, tc := range []struct {
		err               error
		usage, incomplete bool
		msg               string
	}{
		{usage, true, false, bad.Error()},
		{fmt.Errorf("open: %w", usage), true, false, "open: " + bad.Error()},
		{incomplete, false, true, "interrupted while waiting"},
		{ErrIncomplete, false, true, ErrIncomplete.Error()},
		{failed, false, false, "disk full"},
	} {
		if errors.Is(tc.err, ErrUsage) != tc.usage || errors.Is(tc.err, ErrIncomplete) != tc.incomplete || tc.err.Error() != tc.msg {
			t.Errorf("%v: usage %v incomplete %v, want %v %v and message %q", tc.err,
				errors.Is(tc.err, ErrUsage), errors.Is(tc.err, ErrIncomplete), tc.usage, tc.incomplete, tc.msg)
		}
	}
	for _, tc := range []struct{ a, b, want error }{
		{nil, nil, nil},
		{nil, ErrIncomplete, ErrIncomplete},
		{ErrIncomplete, nil, ErrIncomplete},
		{incomplete, failed, failed},
		{failed, ErrIncomplete, failed},
		{failed, usage, failed}, // the first failure stays
	} {
		if got := worse(tc.a, tc.b); got != tc.want {
			t.Errorf("worse(%v, %v) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}
