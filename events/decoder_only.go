package events

import "fmt"

// A replaying reducer reads few fields of its most frequent payloads (of a
// call.finished, a projection reads only whether the call killed its
// child), yet validating and storing every field of them is most of the
// cost of decoding. [Decoder.Only] lets such a caller say what it reads.

// maxOnlyFields bounds the fields of a kind [Decoder.Only] can narrow: the
// kept set is a bit mask.
const maxOnlyFields = 64

// Only narrows what d's fast path yields for payloads of kind to the named
// fields: the others are left at their zero values, and the payload's
// Validate is not run. Every field is still read for its canonical form
// (the fast path still declines anything else, and the strict decoder then
// decodes and validates the whole payload), but the values are not
// checked. That is for bytes read back from a ledger, which validated
// every payload when it was appended and whose hash chain `verify` checks,
// and only for callers that read nothing but the named fields. What the
// caller reads is never a value Validate would refuse: a kept bool is
// valid whatever its value, and a kept field with value rules (a string,
// a number, a list) that is present makes the payload decoded whole and
// validated, as without Only. Only an unkept field's value goes unchecked,
// and keeping an optional field that is usually absent (the deciding
// policies of a call.admitted) costs nothing while it is absent.
//
// An unknown kind, a kind the fast path does not decode or an unknown
// field is an error wrapping [ErrInvalid], and d is unchanged.
func (d *Decoder) Only(kind Kind, fields ...string) error {
	c := codecs[kind]
	if c == nil || len(c.fields) > maxOnlyFields {
		return fmt.Errorf("%w: %s: no fast decoding to narrow", ErrInvalid, kind)
	}
	skip := uint64(1)<<len(c.fields) - 1
	if len(c.fields) == maxOnlyFields {
		skip = ^uint64(0)
	}
	for _, name := range fields {
		found := false
		for i, f := range c.fields {
			if f.name == name {
				skip &^= 1 << i
				found = true
			}
		}
		if !found {
			return fmt.Errorf("%w: %s has no field %q", ErrInvalid, kind, name)
		}
	}
	if d.only == nil {
		d.only = make([]onlyMask, len(codecs))
	}
	d.only[c.idx] = onlyMask{skip: skip, set: true}
	return nil
}

// onlyMask is what [Decoder.Only] set for one kind: the fields not kept.
type onlyMask struct {
	skip uint64
	set  bool
}

// narrowed returns the fields of c that d does not keep, and whether
// Only narrowed c at all.
func (d *Decoder) narrowed(c *codec) (uint64, bool) {
	if d.only == nil {
		return 0, false
	}
	m := d.only[c.idx]
	return m.skip, m.set
}
