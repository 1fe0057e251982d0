"""Forms of the investigation pages: they parse and bound what a person types; the services
(investigations/services/*) decide whether it is allowed and write it."""
from __future__ import annotations

from django import forms

from investigations.models import Case, Hypothesis, Verdict
from telemetry import timebounds
from telemetry.queries.interruptions import INTERRUPTION_STATES
from telemetry.rules import COMPONENT_SCOPES, CONDITIONS, LEAD_WINDOW_MAX_S, LEAD_WINDOW_MIN_S, OPERATORS

RANGES = {"24h": 86400, "7d": 7 * 86400, "30d": 30 * 86400, "90d": 90 * 86400, "all": None}
HAS_CASE = (("", "any"), ("yes", "has a case"), ("no", "no case yet"))


class InboxFilterForm(forms.Form):
    range = forms.ChoiceField(choices=[(k, "all time" if k == "all" else f"last {k}") for k in RANGES],
                              required=False, initial="7d")
    cluster = forms.CharField(max_length=200, required=False)
    state = forms.ChoiceField(choices=[("", "any state")] + [(s, s) for s in INTERRUPTION_STATES], required=False)
    root_cause = forms.CharField(max_length=500, required=False)
    has_case = forms.ChoiceField(choices=HAS_CASE, required=False)
    q = forms.CharField(max_length=200, required=False)
    page = forms.IntegerField(min_value=1, max_value=10000, required=False)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # "from" is a Python keyword: these two fields cannot be class attributes.
        self.fields["from"] = forms.CharField(max_length=40, required=False)
        self.fields["to"] = forms.CharField(max_length=40, required=False)

    def clean(self):
        """Absolute from/to (timebounds: a day or an ISO date-time, UTC) replace the relative range."""
        data = super().clean()
        try:
            data["start"], data["end"] = timebounds.parse_range(data.get("from"), data.get("to"))
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None
        return data


def error_text(form) -> str:
    """A form's errors as one line: "field: reason; ..." (errors of the whole form bare)."""
    return "; ".join((f"{k}: " if k != "__all__" else "") + " ".join(v) for k, v in form.errors.items())


class PinHypothesisForm(forms.Form):
    statement = forms.CharField(max_length=4000, widget=forms.Textarea(attrs={"rows": 2}))
    metric = forms.CharField(max_length=200)
    component_scope = forms.ChoiceField(choices=[(s, s) for s in COMPONENT_SCOPES])
    condition = forms.ChoiceField(choices=[(c, c) for c in CONDITIONS])
    operator = forms.ChoiceField(choices=[(o, o) for o in OPERATORS])
    threshold = forms.FloatField()
    lead_window_min = forms.IntegerField(min_value=LEAD_WINDOW_MIN_S // 60, max_value=LEAD_WINDOW_MAX_S // 60,
                                         initial=360, help_text="minutes before t0")
    outcome = forms.CharField(max_length=500)
    combined_with = forms.CharField(max_length=300, required=False,
                                    help_text="optional: and|then METRIC [rate] > N within 30 min")
    note = forms.CharField(max_length=2000, required=False)


class LinkHypothesisForm(forms.Form):
    hypothesis = forms.ModelChoiceField(queryset=Hypothesis.objects.all())
    note = forms.CharField(max_length=2000, required=False)


class VerdictForm(forms.Form):
    kind = forms.ChoiceField(choices=Verdict.Kind.choices, widget=forms.RadioSelect)
    hypothesis = forms.ModelChoiceField(queryset=Hypothesis.objects.none(), required=False,
                                        empty_label="— none (root cause only) —")
    root_cause = forms.CharField(max_length=500, required=False)
    rationale = forms.CharField(max_length=10000, widget=forms.Textarea(attrs={"rows": 3}),
                                error_messages={"required": "A rationale is required: say what you looked at and what it showed."})

    def __init__(self, *args, case: Case, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["hypothesis"].queryset = Hypothesis.objects.filter(pins__case=case)
        self.fields["hypothesis"].label_from_instance = lambda h: f"{h.short_id} {h.statement[:80]}"


class CommentForm(forms.Form):
    body = forms.CharField(max_length=10000, widget=forms.Textarea(attrs={"rows": 2}))
