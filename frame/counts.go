package frame

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Counts is how many frames of a scan have each status.
type Counts struct {
	OK, Missing, CRCMismatch, Rejected int
	Other                              int // a status this version does not know
}

// Add counts one frame of status s.
func (c *Counts) Add(s uint8) {
	switch s {
	case StatusOK:
		c.OK++
	case StatusMissing:
		c.Missing++
	case StatusCRCMismatch:
		c.CRCMismatch++
	case StatusRejected:
		c.Rejected++
	default:
		c.Other++
	}
}

// CountRecords counts the records by status.
func CountRecords(records []Record) Counts {
	var c Counts
	for _, r := range records {
		c.Add(r.Status)
	}
	return c
}

// Written reports whether a frame of status s has an image in the file:
// it is ok, or was received damaged.
func Written(s uint8) bool { return s == StatusOK || s == StatusCRCMismatch }

// Written returns how many frames have an image in the file: those ok
// and those received damaged.
func (c Counts) Written() int { return c.OK + c.CRCMismatch }

// String returns the counts as "ok 98, missing 1, crc mismatch 0,
// rejected 1", with ", other N" where there are frames of a status this
// version does not know.
func (c Counts) String() string {
	s := fmt.Sprintf("ok %d, missing %d, crc mismatch %d, rejected %d", c.OK, c.Missing, c.CRCMismatch, c.Rejected)
	if c.Other > 0 {
		s += fmt.Sprintf(", other %d", c.Other)
	}
	return s
}

// StatusName returns the name of a frame status, as files and messages
// spell it: "ok", "missing", "crc mismatch" or "rejected".
func StatusName(s uint8) string {
	names := [...]string{"ok", "missing", "crc mismatch", "rejected"}
	if int(s) < len(names) {
		return names[s]
	}
	return fmt.Sprintf("status %d", s)
}

// Problems lists the frames whose status is not ok, by status, in runs
// of frame numbers: "missing frames 3, 12-14; crc mismatch frame 17". A
// long list is cut after 12 runs of a status, saying how many more there
// are. All frames ok give "".
func Problems(records []Record) string {
	runs := map[uint8][]string{} // by status: runs of frame numbers
	var order []uint8
	count := map[uint8]int{}
	for i := 0; i < len(records); {
		s := records[i].Status
		if s == StatusOK {
			i++
			continue
		}
		j := i
		for j+1 < len(records) && records[j+1].Status == s {
			j++
		}
		if _, seen := runs[s]; !seen {
			order = append(order, s)
		}
		if i == j {
			runs[s] = append(runs[s], strconv.Itoa(i))
		} else {
			runs[s] = append(runs[s], fmt.Sprintf("%d-%d", i, j))
		}
		count[s] += j - i + 1
		i = j + 1
	}
	slices.Sort(order)
	const most = 12
	var parts []string
	for _, s := range order {
		label := "frames"
		if count[s] == 1 {
			label = "frame"
		}
		list := runs[s]
		text := strings.Join(list[:min(len(list), most)], ", ")
		if len(list) > most {
			text += fmt.Sprintf(", … (%d more runs)", len(list)-most)
		}
		parts = append(parts, fmt.Sprintf("%s %s %s", StatusName(s), label, text))
	}
	return strings.Join(parts, "; ")
}
