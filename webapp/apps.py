from django.apps import AppConfig


class WebappConfig(AppConfig):
    name = "webapp"
    verbose_name = "Precursor"

    def ready(self):
        from django.conf import settings

        from telemetry import store

        # Point the telemetry package at the configured store; it never reads Django itself.
        store.configure(
            settings.TELEMETRY_DSN,
            cluster=settings.TELEMETRY_CLUSTER,
            ttl_days=settings.TELEMETRY_TTL_DAYS,
            query_timeout_s=settings.TELEMETRY_QUERY_TIMEOUT_S,
            max_concurrent_calls=settings.TELEMETRY_MAX_CONCURRENT_CALLS,
        )
