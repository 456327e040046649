"""The labelled scrubbing corpus, by class (issues 15 and 20): shared by ``test_corpus.py`` and by ``make bench``
(``benchmarks.scrubbing`` prints the classifier's precision and recall on ``CLASSIFIER_LABELLED``).

Scrubber classes: ``positives`` are ``(text, secret that must not survive, context that must survive)``;
``negatives`` are texts that must come out byte-for-byte unchanged - at least as many as the positives.
Classifier classes: texts the learning guard must refuse (secret) or accept (benign). Fake credentials are
assembled from pieces so that secret scanners do not flag this file.
"""

from __future__ import annotations

KHM = "khm_" + "0f1e2d3c4b5a" + "_" + "9f3c1e5b7d4a6f8e0c2b4d6f8a0c2e4b" + "6d8f0a1b2c3d4e5f"
KHM_2 = "khm_" + "a1b2c3d4e5f6" + "_" + "00112233445566778899aabbccddeeff" + "0011223344556677"
GLPAT = "gl" + "pat-" + "xY9zW8vU7tS6rQ5pO4nM"
GLPAT_2 = "gl" + "pat-" + "Ab3dEfGh1jKlMn0pQrSt"
GLDT = "gl" + "dt-" + "kP2mQ9rT4vX7zB1cD5fG"
HEX40 = "3f2a9c1e5b7d4a6f8e0c" + "2b4d6f8a0c2e4b6d8f0a"
HEX40_B = "0a1b2c3d4e5f60718293" + "a4b5c6d7e8f901234567"
HEX32 = "9c1e5b7d4a6f8e0c" + "2b4d6f8a0c2e4b6d"
AWS_ID = "AKIA" + "IOSFODNN7EXAMPLE"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/" + "bPxRfiCYEXAMPLEKEY"
PEM_HEAD = "-----BEGIN " + "RSA PRIVATE KEY-----"
PEM_BODY = "MIIEowIBAAKCAQEA1x2y3z4" + "MIIEowIBAAKCAQEA1x2y3z4" + "MIIEowIBAAKCAQEA1x2y3z4"

SCRUB_CLASSES: dict[str, dict[str, list]] = {
    "product API keys (khm_) in prose": {
        "positives": [
            (f"use {KHM} to call the API", KHM, ["use", "to call the API"]),
            (f"The agent key is {KHM_2}, keep it safe.", KHM_2, ["The agent key is", "keep it safe"]),
            (f"paste ({KHM}) into the client", KHM, ["paste (", ") into the client"]),
            (f"KHEISH_API_KEY={KHM} make run", KHM, ["make run"]),
            (f'{{"agent": "bot-1", "key": "{KHM_2}"}}', KHM_2, ['"agent": "bot-1"']),
            (f"export KEY\n{KHM}\n", KHM, ["export KEY"]),
        ],
        "negatives": [
            "revoked key khm_0123456789ab in the console",
            "Keys look like khm_<prefix>_<secret>.",
            "The khm_ prefix marks Kheish Memory keys.",
            "key khm_9f3c… was revoked yesterday",
            "grep khm_ logs/app.log",
            "rotate the khm_abc keys weekly",
        ],
    },
    "pwd assignments": {
        "positives": [
            ("pwd=hunter2 user=bob", "hunter2", ["user=bob"]),
            ("db_pwd: s3cret99!", "s3cret99", ["db_pwd:"]),
            ("PGPWD='Tr0ub4dor&3' psql -h db", "Tr0ub4dor&3", ["psql -h db"]),
            ("mysql -u root --pwd=Qx7kL2pZ9 -h db1", "Qx7kL2pZ9", ["-h db1"]),
        ],
        "negatives": [
            "PWD=/home/bob",
            "OLDPWD=/var/www/app",
            "cd $PWD/build",
            "echo $PWD",
            "pwd prints the working directory",
            "PWD=~/src/app make test",
            "Run pwd to check where you are.",
        ],
    },
    "secrets spoken in prose after a secret noun": {
        "positives": [
            ("my password is correcthorsebatterystaple", "correcthorsebatterystaple", ["my password is"]),
            ("the wifi passphrase for the lab is tangerine-owl-42", "tangerine-owl-42", ["the wifi passphrase"]),
            ("I set the root password to Hunter2Hunter2 yesterday", "Hunter2Hunter2", ["yesterday"]),
            ("Our staging API key is q8Zr0pLm3xW7v (do not share)", "q8Zr0pLm3xW7v", ["(do not share)"]),
            (
                'The passphrase is "purple monkey dishwasher" for the archive.',
                "purple monkey dishwasher",
                ["for the archive"],
            ),
            ("the PIN for the door is 4821, remember it", "4821", [", remember it"]),
            ("The secret was Zebra-Lantern-77.", "Zebra-Lantern-77", ["The secret was"]),
        ],
        "negatives": [
            "The password is stored in Vault.",
            "the password is too short",
            "My password is the same as before.",
            "The token is valid for one hour.",
            "The API key is in 1Password.",
            "the secret is to keep tests fast",
            "The token is 40 characters long.",
            "The passphrase is required on first boot.",
            "Your password is <redacted>.",
            "The password was reset by the admin.",
            "The password is case-sensitive.",
            "The API key is invalid.",
        ],
    },
    "GitLab tokens": {
        "positives": [
            (f"token {GLPAT} used by CI", GLPAT, ["used by CI"]),
            (f"export GITLAB_TOKEN={GLPAT_2}", GLPAT_2, ["export GITLAB_TOKEN="]),
            (f"git clone https://oauth2:{GLPAT}@gitlab.com/g/r.git", GLPAT, ["@gitlab.com/g/r.git"]),
            (f"PRIVATE-TOKEN: {GLPAT_2}", GLPAT_2, ["PRIVATE-TOKEN:"]),
            (f"deploy with {GLDT} tonight", GLDT, ["tonight"]),
        ],
        "negatives": [
            "GitLab tokens start with glpat-.",
            "glpat-xxxxxxxxxxxxxxxxxxxx",
            "use glpat-<your token> here",
            "the glpat- prefix is documented",
            "grep glpat- .env",
            "glpat tokens expire after a year",
        ],
    },
    "bare hex tokens after a token noun": {
        "positives": [
            (f"deploy token {HEX40}", HEX40, ["deploy token"]),
            (f"call it with API key {HEX32} please", HEX32, ["please"]),
            (f"auth token {HEX40_B} rotated", HEX40_B, ["rotated"]),
            (f"the access token was {HEX40}.", HEX40, ["the access token was"]),
        ],
        "negatives": [
            f"commit {HEX40}",
            "sha256 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
            f"merged revision {HEX40_B} into main",
            f"the token fix landed in commit {HEX40}",
            f"build id {HEX32}",
            f"checksum of the token file: {HEX32}",
            f"request {HEX32} failed",
        ],
    },
    "documented example cloud keys": {
        "positives": [
            (AWS_ID, AWS_ID, []),
            (f"aws_secret_access_key = {AWS_SECRET}", AWS_SECRET, ["aws_secret_access_key ="]),
            (f"AWS keys look like {AWS_ID} in the docs.", AWS_ID, ["in the docs."]),
        ],
        "negatives": [
            "see https://docs.aws.amazon.com/IAM/latest/UserGuide/example.html",
            "aws_access_key_id = YOUR_ACCESS_KEY_ID",
            "an example AWS key id starts with AKIA",
            "AKIA is the prefix of long-term access keys",
        ],
    },
    "US ZIP+4 codes are not phones": {
        "positives": [
            ("Beverly Hills, CA 90210-1234, call 415-555-2671", "415-555-2671", ["CA 90210-1234"]),
        ],
        "negatives": [
            "Beverly Hills, CA 90210-1234",
            "ship to 10001-2345 New York",
            "ZIP 94105-1804",
            "1600 Pennsylvania Ave NW, Washington, DC 20500-0003",
            "zip codes 30301-0001 and 60601-0002",
        ],
    },
    "SSH remotes are not e-mail addresses": {
        "positives": [
            ("email bob@example.com: thanks", "bob@example.com", ["thanks"]),
            (
                "contact ops@example.org for access to git@github.com:org/repo.git",
                "ops@example.org",
                ["git@github.com:org/repo.git"],
            ),
        ],
        "negatives": [
            "git@github.com:org/repo.git",
            "git remote add origin git@gitlab.example.com:group/sub/repo.git",
            "ssh://git@github.com/org/repo.git",
            "scp build.tgz deploy@web-1.example.net:/srv/app/",
            "git+ssh://git@bitbucket.org/team/repo.git",
            "rsync -av ./ ops@backup.example.com:~/snapshots",
            "ssh -i key.pem ubuntu@ec2-1-2-3-4.compute.amazonaws.com",
            "origin  git@gitlab.com:team/app.git (fetch)",
        ],
    },
    "code that asks for a secret keeps the call": {
        "positives": [
            ("password = 'hunter2hunter2'", "hunter2hunter2", ["password = '"]),
            ("token = abc123def456 # temporary", "abc123def456", ["# temporary"]),
        ],
        "negatives": [
            "password = getpass.getpass('Password: ')",
            'api_key = input("API key: ")',
            "const token = prompt('Token:');",
            "secret = read_secret()",
            "key = Fernet.generate_key()",
            "token = await vault.read('kv/app')",
            'password := readPassword("Password: ")',
            "pw = getpass.getpass(prompt='Password: ')",
        ],
    },
    "non-secret neighbours of a secret survive": {
        "positives": [
            (
                "access_token=abc123def456&token_type=Bearer&expires_in=3600",
                "abc123def456",
                ["&token_type=Bearer&expires_in=3600"],
            ),
            (
                "access_token: abc123def456 token_type: Bearer expires_in: 3600",
                "abc123def456",
                ["token_type: Bearer expires_in: 3600"],
            ),
            (
                f"{PEM_HEAD}\n{PEM_BODY}\n{PEM_BODY[:20]}\n\nWhy does ssh say the key format is invalid?",
                PEM_BODY,
                ["Why does ssh say the key format is invalid?"],
            ),
            (
                f"tls:\n  key: |\n    {PEM_HEAD}\n    {PEM_BODY}\n  cert_path: /etc/ssl/certs/server.crt",
                PEM_BODY,
                ["cert_path: /etc/ssl/certs/server.crt"],
            ),
            (
                f"ssl_key: {PEM_HEAD}\n  {PEM_BODY}\nssl_cert: /etc/ssl/cert.pem",
                PEM_BODY,
                ["ssl_cert: /etc/ssl/cert.pem"],
            ),
        ],
        "negatives": [
            "token_type=Bearer&expires_in=3600",
            "Token type: Bearer",
            '{"token_type": "bearer", "expires_in": 3600}',
            "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIU\n-----END CERTIFICATE-----\nThanks!",
            "cert_path: /etc/ssl/certs/server.crt",
            "key_path: /etc/ssl/private/server.key",
        ],
    },
}

# -- classifier (learning content) ------------------------------------------------------------------------------
CLASSIFIER_SECRETS = [
    "SIGNING_KEY=9f8e7d6c5b4a39281706f5e4d3c2b1a0",
    "Call https://api.example.com/v1/items?token=Zx9Qw3Er7Ty1Ui5Op2As8Df4Gh6Jk0L",  # a URL's query still counts
    "The webhook signing secret is 7Hq2LmZ9xR4tP8vK3nB6",
    "encryption key: q8Zr+0pLm3xW/v7Yt2Nc5Ba==",
    "FERNET_KEY = 'Zk9vYmFyQmF6UXV4MTIzNDU2Nzg5MGFiY2RlZmdoaWo='",
    "Use passphrase Tr0ub4dor&3 for the archive.",
    "hmac_salt = 'c29tZXNhbHQxMjM0NTY3OA'",
    "The master password is swordfish.",
    "ENC_PASS: Xk29dLq7Pz",
    "The key for staging is aZ3kP9qL2mN8xV5t",
    "k = 'Q2xpZW50S2V5OmFiY2RlZjEyMzQ1Njc4OTA'",
    "Set JWT_SECRET to f3a9c1e5b7d24a6f8e0c2b4d6f8a0c2e",
    "DB password: p4ssW0rd!2024",
    # issue 20
    "The wifi passphrase for the lab is tangerine-owl-42.",
    "My password is correcthorsebatterystaple.",
    f"Use {KHM} to call the memory API.",
    "Always connect with pwd=hunter2 on the test box.",
    f"The GitLab token is {GLPAT}.",
    f"Deploy token {HEX40} is for the release job.",
    f"The AWS key id is {AWS_ID}.",
    "The door PIN is 4821.",
    "I set the router password to Hunter2Hunter2.",
]
CLASSIFIER_BENIGN = [
    "Never log the Authorization header.",
    "API keys are stored in Vault and rotated every 90 days.",
    "The token is refreshed every hour.",
    "Our password policy requires 14 characters.",
    "Stripe secret keys begin with sk_live_ and test keys with sk_test_.",
    "The X-API-Key header carries the key.",
    "Set api_key in config.yaml to your own key.",
    "api_key = os.environ['OPENAI_API_KEY']",
    "password: ${DB_PASSWORD}",
    "token: <your-token-here>",
    "The access token is short-lived.",
    "Refresh tokens are opaque to clients.",
    "The signing secret is kept in the secrets manager.",
    "Deploy commit 3f2a9c1e5b7d4a6f8e0c2b4d6f8a0c2e4b6d8f0a to staging.",
    "The encryption key is rotated quarterly.",
    "The request id 123e4567-e89b-12d3-a456-426614174000 failed.",
    "Passphrases must be four words or more.",
    "Use the staging key key-2024-v3 for tests.",
    "Token budget: 1000 per run.",
    "The client secretariat prefers written updates.",
    "Prefer `Authorization: Bearer <token>` over query-string tokens.",
    "GitHub fine-grained tokens start with github_pat_.",
    # A URL's path is a location, not a value: share links and short links carry random-looking ids.
    "Here's the link to my pitch deck: https://drive.google.com/file/d/1QwErTyUiOp7AsDfGh3JkL/view, 12 slides.",
    "I have the private SoundCloud right now: https://on.soundcloud.com/jkpTVH4zkTVHc2uHA",
    "The recording is at www.loom.com/share/8f3a9C1e5B7d4A6f8E0c2B4d6F8a0C2e and lasts 4 minutes.",
    "See https://gist.github.com/someone/4f1c9a7e2b6d8c0f3e5a7b9c1d3e5f7a for the script.",
    # Paths and slash-joined phrases are not values, even near a secret noun.
    "Where do I put the key? In /etc/freeradius/3.0/sites-enabled/default or in radiusd.conf?",
    "Are you familiar with the global color token in design system/branding theming?",
    "The secrets live under /var/lib/app/config/secrets.d on every node.",
    # issue 20: prose that only talks about secrets
    "Prefers secrets in 1Password rather than .env files.",
    "Prefers keeping API keys in Doppler, not in the repository.",
    'The login form uses autocomplete="current-password".',
    '<input type="password" name="password" autocomplete="new-password">',
    "Store tokens in the OS keychain, never in plain files.",
    "Uses Auth0 for login and OAuth2 for the public API.",
    "Rotates the Office365 app password every quarter.",
    "The password is too short for the new policy.",
    "Connect with ssh -i key.pem ubuntu@ec2-1-2-3-4.compute.amazonaws.com for the bastion.",
    'password := readPassword("Password: ")',
    # issue 20: code that reads a secret
    "password = getpass.getpass('Password: ')",
    'api_key = input("API key: ")',
    "token = os.environ['GITHUB_TOKEN']",
    "secret = keyring.get_password('svc', 'user')",
    "const key = await secrets.get('stripe')",
    "db_password = vault.read('kv/db')['password']",
    # issue 20: text already redacted
    "secret_token=<redacted>",
    "Access token is <redacted>.",
    "password: <redacted>",
    "api_key=<redacted> and user=bob",
    "Authorization: Bearer <redacted>",
    "The run used key <redacted> against the staging API.",
]
CLASSIFIER_LABELLED: list[tuple[str, bool]] = [(text, True) for text in CLASSIFIER_SECRETS] + [
    (text, False) for text in CLASSIFIER_BENIGN
]
