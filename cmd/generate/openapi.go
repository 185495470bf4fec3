package main

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/cellgate/cellgate/internal/config"
)

// OpenAPIPath is the path every cell serves its OpenAPI document at.
const OpenAPIPath = "/openapi.json"

// obj is a JSON object; encoding/json writes its keys sorted, so the
// documents are deterministic.
type obj = map[string]any

// renderOpenAPI writes the OpenAPI document of the spec's routes: version
// "3.1.0" (JSON Schema 2020-12: numeric exclusive bounds) or "3.0.3" (the
// boolean ones), for client generators that read only 3.0.
func renderOpenAPI(cfg config.Config, api *API, version string) ([]byte, error) {
	v31 := strings.HasPrefix(version, "3.1")
	for _, reserved := range []string{"Problem", "FieldError"} {
		if api.Lookup(reserved) != nil {
			return nil, fmt.Errorf("#%s: the name is the OpenAPI document's own (problem details); rename the definition", reserved)
		}
	}
	schemas := obj{
		"Problem": obj{
			"type":        "object",
			"description": "RFC 9457 problem details: every refusal of the runtime and of the generated validation.",
			"required":    []string{"type", "title", "status", "code"},
			"properties": obj{
				"type":   obj{"type": "string"},
				"title":  obj{"type": "string"},
				"status": obj{"type": "integer"},
				"detail": obj{"type": "string"},
				"code":   obj{"type": "string", "description": "stable, machine-readable (docs/errors.md)"},
				"errors": obj{"type": "array", "items": obj{"$ref": "#/components/schemas/FieldError"},
					"description": "invalid_request only: every failing field"},
			},
		},
		"FieldError": obj{
			"type":     "object",
			"required": []string{"field", "in", "reason"},
			"properties": obj{
				"field":  obj{"type": "string"},
				"in":     obj{"type": "string", "enum": []string{"body", "path", "query"}},
				"reason": obj{"type": "string"},
			},
		},
	}
	for _, s := range api.Schemas {
		schemas[s.Name] = schemaJSON(s, v31)
	}
	problem := func(desc string, example obj, retry bool) obj {
		r := obj{"description": desc, "content": obj{"application/problem+json": obj{
			"schema": obj{"$ref": "#/components/schemas/Problem"}, "example": example}}}
		if retry {
			r["headers"] = obj{"Retry-After": obj{"description": "seconds to wait before retrying",
				"schema": obj{"type": "integer"}}}
		}
		return r
	}
	ex := func(status int, code, detail string) obj {
		return obj{"type": "about:blank", "title": statusText[status], "status": status, "code": code, "detail": detail}
	}
	invalid := ex(400, "invalid_request", "1 field is invalid")
	invalid["errors"] = []obj{{"field": "email", "in": "body", "reason": "is required"}}
	responses := obj{
		"InvalidRequest":   problem("the body, path or query parameters do not match the route's schema (invalid_request, invalid_json, trailing_data)", invalid, false),
		"Unauthorized":     problem("no tenant, or its credential is refused", ex(401, "tenant_missing", "the request names no tenant"), false),
		"UnsupportedMedia": problem("the body is not application/json", ex(415, "unsupported_media_type", "body must be application/json (UTF-8)"), false),
		"TooManyRequests":  problem("the tenant's rate or quota is spent", ex(429, "tenant_rate_limited", "tenant request rate exceeded"), true),
		"Unavailable":      problem("the tenant's, the server's or the shard's capacity is full, or the shard is down", ex(503, "tenant_overloaded", "too many requests in flight for this tenant"), true),
	}
	ref := func(name string) obj { return obj{"$ref": "#/components/responses/" + name} }

	paths := obj{}
	for _, r := range cfg.Routes {
		item, _ := paths[r.Path].(obj)
		if item == nil {
			item = obj{}
			paths[r.Path] = item
		}
		op := obj{"operationId": r.Handler}
		if r.Public {
			op["security"] = []obj{}
		}
		var params []obj
		for _, p := range pathParams(r.Path) {
			schema := obj{"type": "string"}
			if r.Params != "" {
				for _, pr := range api.Lookup(r.Params).Props {
					if pr.Name == p {
						schema = schemaJSON(pr.Schema, v31)
					}
				}
			}
			params = append(params, obj{"name": p, "in": "path", "required": true, "schema": schema})
		}
		if r.Query != "" {
			for _, p := range api.Lookup(r.Query).Props {
				params = append(params, obj{"name": p.Name, "in": "query", "required": !p.OnWireOptional(), "schema": schemaJSON(p.Schema, v31)})
			}
		}
		if params != nil {
			op["parameters"] = params
		}
		resp := obj{}
		if r.Request != "" {
			op["requestBody"] = obj{"required": true, "content": obj{"application/json": obj{
				"schema": obj{"$ref": "#/components/schemas/" + r.Request}}}}
			resp["415"] = ref("UnsupportedMedia")
		}
		if r.Request != "" || r.Query != "" || r.Params != "" {
			resp["400"] = ref("InvalidRequest")
		}
		for status, name := range r.Responses {
			desc := statusText[atoi(status)]
			desc = cmp.Or(desc, "status "+status)
			resp[status] = obj{"description": desc, "content": obj{"application/json": obj{
				"schema": obj{"$ref": "#/components/schemas/" + name}}}}
		}
		if len(r.Responses) == 0 {
			resp["default"] = obj{"description": "the handler's answer (the route declares no response schema)"}
		}
		if !r.Public {
			resp["401"] = ref("Unauthorized")
			resp["429"] = ref("TooManyRequests")
			resp["503"] = ref("Unavailable")
		}
		op["responses"] = resp
		item[strings.ToLower(r.Method)] = op
	}
	paths[OpenAPIPath] = obj{"get": obj{"operationId": "OpenAPI", "security": []obj{},
		"description": "this document",
		"responses":   obj{"200": obj{"description": "the OpenAPI document", "content": obj{"application/json": obj{"schema": obj{"type": "object"}}}}}}}

	doc := obj{
		"openapi":    version,
		"info":       obj{"title": cfg.Service.Name, "version": "1"},
		"paths":      paths,
		"components": obj{"schemas": schemas, "responses": responses},
	}
	if cfg.Tenancy.Enabled {
		scheme, err := tenantScheme(cfg.Tenancy)
		if err != nil {
			return nil, err
		}
		if scheme != nil {
			doc["components"].(obj)["securitySchemes"] = obj{"tenant": scheme}
			doc["security"] = []obj{{"tenant": []string{}}}
		}
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// tenantScheme is the security scheme of the tenant source. A subdomain
// is no credential OpenAPI can describe: nil.
func tenantScheme(t config.Tenancy) (obj, error) {
	switch t.Source {
	case "header":
		return obj{"type": "apiKey", "in": "header", "name": t.Header.Name, "description": "the tenant id"}, nil
	case "session":
		return obj{"type": "apiKey", "in": "cookie", "name": t.Session.Cookie, "description": "the signed session naming the tenant"}, nil
	case "jwt":
		return obj{"type": "http", "scheme": "bearer", "bearerFormat": "JWT", "description": "a token whose claim names the tenant"}, nil
	case "subdomain":
		return nil, nil
	}
	return nil, fmt.Errorf("tenancy.source: %q has no OpenAPI security scheme", t.Source)
}

// schemaJSON renders s as an OpenAPI schema object.
func schemaJSON(s *Schema, v31 bool) obj {
	if s.Ref != "" {
		return obj{"$ref": "#/components/schemas/" + s.Ref}
	}
	o := obj{"type": s.Type}
	if s.Format != "" {
		o["format"] = s.Format
	}
	if s.Description != "" {
		o["description"] = s.Description
	}
	if s.Type == "object" {
		props := obj{}
		var req []string
		for _, p := range s.Props {
			props[p.Name] = schemaJSON(p.Schema, v31)
			if !p.OnWireOptional() {
				req = append(req, p.Name)
			}
		}
		o["properties"] = props
		o["additionalProperties"] = false
		if req != nil {
			sort.Strings(req)
			o["required"] = req
		}
	}
	if s.Items != nil {
		o["items"] = schemaJSON(s.Items, v31)
	}
	if len(s.Enum) > 0 {
		o["enum"] = s.Enum
	}
	if s.Default != nil {
		o["default"] = s.Default
	}
	for k, p := range map[string]*int64{"minLength": s.MinLength, "maxLength": s.MaxLength, "minItems": s.MinItems, "maxItems": s.MaxItems} {
		if p != nil {
			o[k] = *p
		}
	}
	if s.Pattern != "" {
		o["pattern"] = s.Pattern
	}
	bound := func(n json.Number, excl bool, plain, exclKey string) {
		switch {
		case n == "":
		case excl && v31:
			o[exclKey] = n
		case excl:
			o[plain] = n
			o[exclKey] = true
		default:
			o[plain] = n
		}
	}
	bound(s.Minimum, s.ExclMin, "minimum", "exclusiveMinimum")
	bound(s.Maximum, s.ExclMax, "maximum", "exclusiveMaximum")
	return o
}

func atoi(s string) int {
	n := 0
	for _, c := range s {
		n = n*10 + int(c-'0')
	}
	return n
}

// statusText names the statuses the document uses (net/http's text, kept
// here: the generator links no HTTP).
var statusText = map[int]string{
	200: "OK", 201: "Created", 202: "Accepted", 204: "No Content",
	400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 409: "Conflict",
	415: "Unsupported Media Type", 422: "Unprocessable Entity", 429: "Too Many Requests", 503: "Service Unavailable",
}
