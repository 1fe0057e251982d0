from django.db import migrations, models


class Migration(migrations.Migration):
    """Signals together: a hypothesis may combine its signal with a second one."""

    dependencies = [("investigations", "0006_display_tz_preference")]

    operations = [
        migrations.AddField(
            model_name="hypothesis",
            name="combined_with",
            field=models.CharField(blank=True, default="", max_length=300),
        ),
    ]
