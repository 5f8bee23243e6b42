package events

// FastForTest runs only the fast path of d on raw.
func (d *Decoder) FastForTest(raw []byte) (Header, Payload, bool) {
	var h Header
	p, ok := d.fast(raw, &h)
	return h, p, ok
}
