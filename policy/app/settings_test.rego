package cellgate.app_test

import data.cellgate.app

test_default_over_max_denied if {
	msgs := app.deny with input as {"settings": {"orders_page_default": 600, "orders_page_max": 500}}
	some m in msgs
	startswith(m, "settings.orders_page_default: 600 is over")
}

test_default_within_max_allowed if {
	count(app.deny) == 0 with input as {"settings": {"orders_page_default": 50, "orders_page_max": 500}}
}
