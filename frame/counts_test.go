package frame

import "testing"

func TestCountRecords(t *testing.T) {
	recs := []Record{{Status: StatusOK}, {Status: StatusMissing}, {Status: StatusOK}, {Status: StatusCRCMismatch},
		{Status: StatusRejected}, {Status: 9}, {Status: StatusMissing}}
	c := CountRecords(recs)
	if want := (Counts{OK: 2, Missing: 2, CRCMismatch: 1, Rejected: 1, Other: 1}); c != want {
		t.Errorf("CountRecords = %+v, want %+v", c, want)
	}
	if c.Written() != 3 {
		t.Errorf("Written() = %d, want 3", c.Written())
	}
	if got, want := c.String(), "ok 2, missing 2, crc mismatch 1, rejected 1, other 1"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if got, want := (Counts{OK: 5}).String(), "ok 5, missing 0, crc mismatch 0, rejected 0"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

func TestProblems(t *testing.T) {
	recs := func(statuses ...uint8) []Record {
		r := make([]Record, len(statuses))
		for i, s := range statuses {
			r[i].Status = s
		}
		return r
	}
	const ok, miss, crc, rej = StatusOK, StatusMissing, StatusCRCMismatch, StatusRejected
	many := make([]uint8, 0, 60)
	for range 15 {
		many = append(many, ok, miss)
	}
	for _, tc := range []struct {
		name string
		in   []Record
		want string
	}{
		{"all ok", recs(ok, ok, ok), ""},
		{"none", nil, ""},
		{"one of each", recs(ok, miss, crc, ok, rej), "missing frame 1; crc mismatch frame 2; rejected frame 4"},
		{"runs", recs(miss, ok, ok, miss, miss, miss, ok, crc, crc, miss), "missing frames 0, 3-5, 9; crc mismatch frames 7-8"},
		{"cut", recs(many...), "missing frames 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, … (3 more runs)"},
		{"unknown", recs(ok, 7), "status 7 frame 1"},
	} {
		if got := Problems(tc.in); got != tc.want {
			t.Errorf("%s: Problems = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestWritten(t *testing.T) {
	for s, want := range map[uint8]bool{StatusOK: true, StatusCRCMismatch: true, StatusMissing: false, StatusRejected: false, 9: false} {
		if Written(s) != want {
			t.Errorf("Written(%s) = %v, want %v", StatusName(s), !want, want)
		}
	}
}
