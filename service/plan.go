package service

import "encoding/json"

// UnmarshalJSON reads a plan, noting which angles it writes.
func (p *Plan) UnmarshalJSON(data []byte) error {
	type plain Plan // without this method
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(data, &keys); err != nil {
		return err
	}
	if err := json.Unmarshal(data, (*plain)(p)); err != nil {
		return err
	}
	_, p.written.start = keys["angle_start"]
	_, p.written.end = keys["angle_end"]
	return nil
}

// Keys returns the profile keys the plan sets, each with the request
// field that set it: the counts and the sequence, which a plan replaces
// whole, and each angle the request wrote, 0 included (or, for a plan made
// in Go, that is not 0). An angle left out keeps the profile's. No plan
// sets none.
func (p *Plan) Keys() []OverrideKey {
	if p == nil {
		return nil
	}
	keys := []OverrideKey{
		{Key: "plan.darks", Field: "plan.darks", Value: p.Darks},
		{Key: "plan.flats", Field: "plan.flats", Value: p.Flats},
		{Key: "plan.projections", Field: "plan.projections", Value: p.Projections},
		{Key: "plan.sequence", Field: "plan.sequence", Value: p.Sequence},
	}
	if p.written.start || p.AngleStart != 0 {
		keys = append(keys, OverrideKey{Key: "plan.angle_start", Field: "plan.angle_start", Value: p.AngleStart})
	}
	if p.written.end || p.AngleEnd != 0 {
		keys = append(keys, OverrideKey{Key: "plan.angle_end", Field: "plan.angle_end", Value: p.AngleEnd})
	}
	return keys
}
