package tenancy

// idByte[b] reports whether byte b may appear in a tenant id. A table keeps
// the check to one load per byte on the hot path.
var idByte = func() (t [256]bool) {
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
	}
	for c := 'A'; c <= 'Z'; c++ {
		t[c] = true
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	t['.'], t['_'], t['-'] = true, true, true
	return t
}()

// ValidateID checks that id is a well-formed tenant id: non-empty, at most
// maxLen bytes (DefaultMaxIDLength when maxLen <= 0) and made only of
// [A-Za-z0-9._-]. Ids are case-sensitive. The error, if any, is an *Error of
// KindInvalid. Apps should call it before SignSession.
func ValidateID(id string, maxLen int) error {
	if maxLen <= 0 {
		maxLen = DefaultMaxIDLength
	}
	if e := validateID(id, maxLen); e != nil {
		return e
	}
	return nil
}

// validateID returns a concrete *Error so callers on the hot path need no
// interface conversion or type assertion.
func validateID(id string, maxLen int) *Error {
	if id == "" {
		return errIDEmpty
	}
	if len(id) > maxLen {
		return errIDTooLong
	}
	for i := 0; i < len(id); i++ {
		if !idByte[id[i]] {
			return errIDCharset
		}
	}
	return nil
}
