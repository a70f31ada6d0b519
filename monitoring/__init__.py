"""Prometheus metrics of revisit's processes, Grafana dashboards and alert rules."""
