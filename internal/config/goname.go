package config

import "strings"

// GoName turns a snake_case spec name into an exported Go identifier,
// keeping common initialisms upper-case (account_id → AccountID).
func GoName(s string) string {
	var b strings.Builder
	for _, part := range strings.FieldsFunc(s, func(r rune) bool { return r == '_' || r == '-' }) {
		if up := strings.ToUpper(part); initialisms[up] {
			b.WriteString(up)
			continue
		}
		b.WriteString(strings.ToUpper(part[:1]) + part[1:])
	}
	return b.String()
}

// initialisms stay upper-case in Go names.
var initialisms = map[string]bool{"ID": true, "URL": true, "HTTP": true, "API": true, "UUID": true, "IP": true, "JSON": true, "SQL": true}
