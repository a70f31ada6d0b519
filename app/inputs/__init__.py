"""What comes in from outside, parsed and checked: listings, API payloads, URL rules."""
