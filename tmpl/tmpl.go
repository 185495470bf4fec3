// Package tmpl embeds the text/template files cmd/generate renders into gen/.
//
// Templates hold layout only; every computation they need is a FuncMap helper
// in cmd/generate, so it can be unit-tested in Go. Read-only; safe for
// concurrent use.
package tmpl

import "embed"

// FS holds every *.tmpl file of this directory.
//
//go:embed *.tmpl
var FS embed.FS
