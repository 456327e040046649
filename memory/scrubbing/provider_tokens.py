"""Provider credential shapes recognised by the scrubber (``memory.scrubbing``), beyond spec §4.2 step A.2.

The formats follow gitleaks' public rule set (MIT; facts about token formats, not its code). Each shape is
bounded so it does not eat surrounding text: the pattern itself fixes where the token ends (exact lengths
carry a negative look-ahead), and the character before a match is checked by the scrubber (``left``):

* ``"word"``   - the token starts a run of token characters (ASCII letters, digits, ``_ - .``) at least 20
  long: ``token=sk_live_…`` and ``"sk_live_…"`` match, ``mask_live_…`` does not;
* ``"none"``   - the pattern carries its own context (``hooks.slack.com/…``, ``AccountKey=…``).

``prefixes`` are the literal beginnings of the pattern: the scrubber only tries a shape where the text
starts with one of them (see ``memory.scrubbing`` on speed). Patterns are case-sensitive. ``keep`` is a regex
for a leading part left visible (``AccountKey=`` stays, the key goes).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TokenShape:
    name: str
    prefixes: tuple[str, ...]
    pattern: str
    left: str = "word"
    keep: str = ""


_END = r"(?![A-Za-z0-9_\-])"

TOKEN_SHAPES: tuple[TokenShape, ...] = (
    # This product's own API keys (``khm_<12 hex prefix>_<48 hex secret>``, ``memory.identity``); the bare
    # 12-hex prefix is the key's public id (shown in the console and the audit) and stays.
    TokenShape("kheish", ("khm_",), r"khm_[A-Za-z0-9_\-]{16,}"),
    # Anthropic (api03 / admin01 / oauth tokens) and any other sk-ant- key.
    TokenShape("anthropic", ("sk-ant-",), r"sk-ant-[A-Za-z0-9_\-]{8,}"),
    # OpenAI: project / service-account / admin keys, and legacy sk- keys.
    TokenShape(
        "openai",
        ("sk-proj-", "sk-svcacct-", "sk-admin-", "sk-None-"),
        r"sk-(?:proj|svcacct|admin|None)-[A-Za-z0-9_\-]{8,}",
    ),
    TokenShape("openai-legacy", ("sk-",), r"sk-[A-Za-z0-9]{20,}" + _END),
    # GitHub personal / OAuth / user-to-server / server-to-server / refresh tokens, fine-grained PATs.
    TokenShape("github", ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"), r"gh[pousr]_[A-Za-z0-9]{36,255}" + _END),
    TokenShape("github-fine-grained", ("github_pat_",), r"github_pat_[A-Za-z0-9_]{22,255}"),
    # GitLab personal / deploy / runner / trigger / feed / SCIM / OAuth / CI job / mail / agent tokens.
    TokenShape(
        "gitlab",
        ("gl",),
        r"gl(?:pat|dt|rt|ptt|ft|soat|oas|cbt|imt|agent|ffct)-[A-Za-z0-9_\-]{16,300}(?:\.[A-Za-z0-9_\-]{1,40}){0,3}",
    ),
    # Slack bot / user / app / legacy workspace / refresh / config tokens and incoming-webhook URLs. A rotating
    # token wraps another prefix (``xoxe.xoxp-1-…``, the refresh token ``xoxe-1-…``).
    TokenShape("slack", ("xox",), r"xox[abposre](?:\.xox[abposre])?-[A-Za-z0-9\-]{10,}"),
    TokenShape("slack-app", ("xapp-",), r"xapp-\d-[A-Za-z0-9\-]{10,}"),
    TokenShape(
        "slack-webhook",
        ("hooks.slack.com/",),
        r"hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9+/_\-]{20,}",
        left="none",
        keep=r"hooks\.slack\.com/(?:services|workflows|triggers)/",
    ),
    # AWS access key ids (long-term AKIA, temporary ASIA, ABIA, ACCA, A3T…).
    TokenShape(
        "aws",
        ("AKIA", "ASIA", "ABIA", "ACCA", "A3T"),
        r"(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])[A-Z0-9]{16}(?![A-Za-z0-9])",
    ),
    # Google API keys, OAuth access tokens and OAuth client secrets.
    TokenShape("google-api-key", ("AIza",), r"AIza[0-9A-Za-z_\-]{35}" + _END),
    TokenShape("google-oauth", ("ya29.",), r"ya29\.[0-9A-Za-z_\-]{20,}"),
    TokenShape("google-client-secret", ("GOCSPX-",), r"GOCSPX-[0-9A-Za-z_\-]{20,}"),
    # Stripe secret / restricted / live publishable keys and webhook signing secrets.
    TokenShape("stripe", ("sk_", "rk_"), r"(?:sk|rk)_(?:live|test|prod)_[0-9A-Za-z]{10,247}" + _END),
    TokenShape("stripe-publishable", ("pk_live_",), r"pk_live_[0-9A-Za-z]{10,247}" + _END),
    TokenShape("stripe-webhook", ("whsec_",), r"whsec_[0-9A-Za-z+/=]{20,}"),
    # npm and PyPI upload tokens.
    TokenShape("npm", ("npm_",), r"npm_[A-Za-z0-9]{36}" + _END),
    TokenShape("pypi", ("pypi-AgEIcHlwaS5vcmc",), r"pypi-AgEIcHlwaS5vcmc[A-Za-z0-9_\-]{50,}"),
    # Azure storage / service-bus connection strings: the key after AccountKey= / SharedAccessKey= (one shape,
    # so one scan for the shared literal ``Key=``).
    TokenShape(
        "azure-key",
        ("Key=",),
        r"Key=(?:(?<=AccountKey=)|(?<=SharedAccessKey=))[A-Za-z0-9+/]{20,}={0,2}",
        left="none",
        keep=r"Key=",
    ),
    # Twilio API key SIDs (SK…) and account SIDs (AC…).
    TokenShape("twilio", ("SK", "AC"), r"(?:SK[0-9a-fA-F]{32}|AC[0-9a-f]{32})(?![A-Za-z0-9])"),
    # SendGrid: SG.<id>.<secret>.
    TokenShape("sendgrid", ("SG.",), r"SG\.[A-Za-z0-9_\-]{16,32}\.[A-Za-z0-9_\-]{16,64}" + _END),
    # Hugging Face user and organisation tokens.
    TokenShape("huggingface", ("hf_",), r"hf_[A-Za-z0-9]{34,}" + _END),
    TokenShape("huggingface-org", ("api_org_",), r"api_org_[A-Za-z0-9]{34}" + _END),
    # A few more model / platform providers with unambiguous prefixes.
    TokenShape("perplexity", ("pplx-",), r"pplx-[A-Za-z0-9]{48}" + _END),
    TokenShape("groq", ("gsk_",), r"gsk_[A-Za-z0-9]{48,}" + _END),
    TokenShape("xai", ("xai-",), r"xai-[A-Za-z0-9]{60,}" + _END),
    TokenShape("replicate", ("r8_",), r"r8_[A-Za-z0-9]{37}" + _END),
    TokenShape("shopify", ("shp",), r"shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}" + _END),
    TokenShape("linear", ("lin_api_",), r"lin_api_[A-Za-z0-9]{40}" + _END),
    TokenShape("digitalocean", ("dop_v1_", "doo_v1_", "dor_v1_"), r"do[por]_v1_[a-f0-9]{64}" + _END),
    TokenShape("doppler", ("dp.",), r"dp\.(?:pt|st|sa|ct|scim|audit)\.[A-Za-z0-9]{40,44}" + _END),
    TokenShape("vault", ("hvs.", "hvb."), r"hv[sb]\.[A-Za-z0-9_\-]{90,300}" + _END),
    TokenShape("postman", ("PMAK-",), r"PMAK-[a-fA-F0-9]{24}-[a-fA-F0-9]{34}" + _END),
    TokenShape("age", ("AGE-SECRET-KEY-1",), r"AGE-SECRET-KEY-1[0-9A-Z]{58}"),
    # Discord bot tokens: base64 user id (starts M/N/O) . timestamp . HMAC.
    TokenShape(
        "discord", ("M", "N", "O"), r"[MNO][A-Za-z0-9_\-]{23,27}\.[A-Za-z0-9_\-]{6}\.[A-Za-z0-9_\-]{27,40}" + _END
    ),
    # Telegram bot tokens: ``<bot id>:AA…`` (the secret half after the colon goes, the public id stays).
    TokenShape("telegram", (":AA",), r":(?<=\d:)AA[A-Za-z0-9_\-]{33}(?![A-Za-z0-9_\-])", left="none", keep=":"),
)
