package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
)

// TestOpenAPIDocumentsValidate loads the committed documents (the
// service's and the golden cases') with kin-openapi and validates them:
// structure, references, schemas and the examples against their schemas.
func TestOpenAPIDocumentsValidate(t *testing.T) {
	files, err := filepath.Glob("testdata/*/expected/openapi*.json")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../../gen/openapi.json", "../../gen/openapi-3.0.json")
	if len(files) < 4 {
		t.Fatalf("only %d documents found", len(files))
	}
	for _, f := range files {
		t.Run(f, func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			loader := openapi3.NewLoader()
			doc, err := loader.LoadFromData(b)
			if err != nil {
				t.Fatalf("load: %v", err)
			}
			if err := doc.Validate(context.Background(), openapi3.EnableExamplesValidation()); err != nil {
				t.Fatalf("validate: %v", err)
			}
			if len(doc.Paths.Map()) == 0 {
				t.Fatal("no paths")
			}
		})
	}
}
