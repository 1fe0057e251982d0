from django.apps import AppConfig


class InvestigationsConfig(AppConfig):
    name = "investigations"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        # Job kinds register themselves on import.
        from investigations import jobkinds  # noqa: F401
        from investigations.services import exports, fleet_test, lags, logins, scans  # noqa: F401

        logins.connect()
