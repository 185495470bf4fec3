// Package deploytest validates the generated deploy output (gen/deploy) with
// the tools that will consume it: every Kubernetes manifest is strictly
// decoded into k8s.io/api types and every kustomization built with
// kustomize's Go API and with `kubectl kustomize`; the monitoring rules go
// through `promtool check rules` and `promtool test rules`, and every
// PromQL expression through Prometheus' parser.
//
// It is its own module so that k8s.io/api, kustomize and Prometheus stay
// out of the service's dependency graph; `make test` runs it. The package
// holds only tests and has no state.
package deploytest
