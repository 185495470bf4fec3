# The service's own rules (policy/app/, yours: `make upgrade` never touches
# it). Package cellgate.app: its deny and warn sets join the template's
# (data.cellgate.policy), so the generator, `server check`, the boot check
# and conftest evaluate them alike. Each message starts with the spec path
# it is about.
package cellgate.app

deny contains msg if {
	s := input.settings
	s.orders_page_default > s.orders_page_max
	msg := sprintf("settings.orders_page_default: %d is over settings.orders_page_max (%d); GET /orders would refuse its own default", [s.orders_page_default, s.orders_page_max])
}
