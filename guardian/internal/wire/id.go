package wire

// IDRule describes the identifiers ValidID accepts, for error messages.
const IDRule = "[A-Za-z0-9_-]{1,128}"

// MaxIDLen bounds an activation id.
const MaxIDLen = 128

// ValidID reports whether s is a valid activation id: 1 to MaxIDLen bytes,
// each an ASCII letter, digit, '_' or '-'. The rule keeps ids safe in file
// names, ledger keys and log lines; it is a byte-class loop, not a regexp,
// so both processes check it without compiling anything.
func ValidID(s string) bool {
	if len(s) == 0 || len(s) > MaxIDLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}
