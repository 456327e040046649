"""The deterministic extractor: unlabelled first-person statements worth remembering, without a model.

Semantic capture (``learnings.capture``) tries, in order: labelled statements (``Preference:`` …, confidence
98, ``learnings.extraction.heuristic_candidates``), then this extractor, then the model extractor when one is
configured; the first that yields anything wins. Every draft is still a candidate: rules, judge, verification
and review decide what is published.

The input is split into sentences; a sentence is kept when it is a plain first-person statement of one of:

* a **preference** — "I prefer dark mode in every editor", "I'd rather use tabs", "My favourite editor is
  Helix", "I always write tests first", "From now on, answer in French", "Always report sizes in GB"
  (a standing instruction), "I can't stand tabs", "I love hiking";
* a **fact about the user and their work** — "My name is Dana and I work at Initech", "I live in Lyon",
  "I'm a data engineer", "My manager is Lee", "I have two cats", "Our team uses Jira", "I use Neovim";
* an **event of the user's life** — "I bought a new tennis racket", "We adopted a cat last spring", "I've
  been learning Spanish" (``EVENT_CONFIDENCE``);
* a **decision** — "We decided to use PostgreSQL 16 for analytics", "We agreed on weekly releases",
  "We're going with Terraform", "I've chosen the blue theme";
* inside **narrative** (a long message that asks for something and says something about the user on the
  way): a first-person event, habit or plan after a lead-in or a clause break — "Can you suggest hikes? By the
  way, I've been keeping my climbing gear in the garage since the move", "…, I just sold my old piano",
  "My daily commute is about 50 minutes each way", "I'm planning a week in Reykjavik with my brother"
  (``NARRATIVE_CONFIDENCE``; a plan ``PLAN_CONFIDENCE``); a sentence naming a problem ("it still crashes"),
  quoting first-person words, or asking is not one;
* an explicit **request to remember** — "Remember that the staging database is read-only", "Please note for
  the future: …", "Keep in mind that …" (the remembered clause is the content, its kind classified as above,
  a fact by default).

and none of the signs of a non-statement is present: a question; a hypothetical or wish ("if", "suppose",
"imagine", "would be", "maybe", "might"); a negated verb ("I don't prefer", "we haven't decided");
reported speech or a quote ("she said she prefers…", "“I prefer tea,” he wrote"); a one-off instruction to
the assistant ("Write a story in which my name is Dana", "Translate: I live in Lyon"); role-play; a second- or
third-person subject. Confidence: ``CONFIDENCE`` (below the labelled path's 98), ``WEAK_CONFIDENCE`` for
the weaker forms ("I like", "I use", "I have"). Measured on the labelled corpus in
``tests/learnings/statement_corpus.py`` (``make bench``, ``--only capture``)."""

from __future__ import annotations

import re
from collections.abc import Iterator

from learnings.extraction import Draft, collapse_whitespace
from learnings.validation import content_has_secret_material

CONFIDENCE = 90
WEAK_CONFIDENCE = 80
EVENT_CONFIDENCE = 85
"""Something the user did ("I bought a tennis racket", "We adopted a cat last spring"): a fact of their life."""
MAX_SENTENCE_CHARS = 400
"""A longer sentence is not a statement to keep as one learning (its clauses would be several)."""
MIN_WORDS = 3

_FLAGS = re.IGNORECASE

# Sentences: a line break, or . ! ? followed by a space (not after a lone letter: "e.g. ", "i.e. ").
_SENTENCE_END = re.compile(r"\n+|(?<=[.!?;])(?<![\s(][A-Za-z][.])\s+(?=\S)")
_EDGE = re.compile(r"^(?:[\s\-*•>#]+|\d+[.)]\s+)+|[\s.;,!]+$")

_QUESTION_START = re.compile(
    r"^(?:who|what|when|where|why|how|which|whose|whom|do|does|did|is|are|am|was|were|can|could|would|should|"
    r"shall|will|may|might|have|has|had|isn't|aren't|don't|doesn't|didn't|won't|wouldn't|shouldn't|"
    r"couldn't|any idea|tell me|guess)\b",
    _FLAGS,
)
_HYPOTHETICAL = re.compile(
    r"\b(?:if|unless|suppose|supposing|imagine|imagining|hypothetically|pretend|pretending|let's say|"
    r"say that|what if|in case|assuming|wish|hope|hoping|maybe|perhaps|might|may be|probably|"
    r"would be|would have|would like to know|could|ought|someday|one day|in a world)\b",
    _FLAGS,
)
_NEGATION = re.compile(
    r"\b(?:not|no longer|never (?:decided|agreed|said|chose|preferred)|don't|doesn't|didn't|haven't|hasn't|"
    r"hadn't|isn't|aren't|wasn't|weren't|won't|cannot decide|can't decide|nobody|nothing|neither|nor)\b|n't\b",
    _FLAGS,
)
_NOT_NEGATIONS = re.compile(r"\b(?:can't|cannot|can not) stand\b", _FLAGS)
_REPORTED = re.compile(
    r"\b(?:said|says|say|told|tells|tell me|asked|asks|claims?|claimed|wrote|writes|mentioned|mentions|"
    r"according to|thinks|thought|believes?|believed|reckons?|heard|reported|quoted?|quoting|"
    r"replied|answered|explained|announced|insists?|insisted)\b",
    _FLAGS,
)
_QUOTES = re.compile(r"[\"“”«»„]|(?:^|\s)'[^']+'(?:\s|$)")
_INSTRUCTION = re.compile(
    r"^(?:please\s+|can you\s+|could you\s+|now\s+|ok(?:ay)?,?\s+|then\s+)?(?:write|draft|compose|generate|create|"
    r"translate|summari[sz]e|rewrite|rephrase|paraphrase|explain|describe|list|give|show|make|build|fix|"
    r"debug|refactor|convert|format|correct|proofread|edit|review|check|find|search|look up|calculate|compute|"
    r"act as|play|roleplay|role-play|pretend|simulate|continue|complete|answer|reply|respond|help|suggest|"
    r"recommend|compare|tell|output|print|return|send|open|run|delete|remove|add|update|set|use this|"
    r"here is|here's|below is|the following|consider|assume|let me know)\b",
    _FLAGS,
)
_CONTEXT_WORDS = re.compile(
    r"\b(?:in (?:this|the|a|my) (?:story|poem|novel|scene|script|game|dialogue|example)|for (?:this|the|an?) "
    r"(?:exercise|example|story|game|test|demo)|character|persona|role-?play|example sentence)\b",
    _FLAGS,
)
_YOU_SUBJECT = re.compile(
    r"^(?:(?:you|your|he|she|they|his|her|their|it|its|this|that|these|those|the user)\b|"
    r"(?!(?:We|I|My|Our|Us|So|And|Also|But)\b)[A-Z][a-z]+ (?:prefers|likes|loves|works|lives|"
    r"is|has|decided|wants|uses)\b)",
    _FLAGS,
)

_REMEMBER = re.compile(
    r"^(?:please\s+|also\s+|and\s+|oh,?\s+|btw,?\s+|by the way,?\s+)*(?:"
    r"(?:remember|keep in mind|bear in mind|note for (?:the future|later|next time)|make a note|take note|"
    r"for future reference|for the record|for your information|fyi)(?:\s+(?:that|this))?"
    r"|(?:don't|do not) forget\s+that)"
    r"(?:\s+for (?:the future|next time|later))?\s*[:,-]?\s+(?!to\s)(?P<body>.+)$",
    _FLAGS,
)

_PREFERENCE_STRONG = re.compile(
    r"^(?:(?:honestly|generally|personally|usually|also|and|but|oh|so),?\s+)*(?:"
    r"i\s+(?:(?:really|strongly|much|definitely|generally|usually|always|also)\s+)*"
    r"(?:prefer|'d prefer|would prefer|'d rather|would rather|favou?r)\b"
    r"|i'd\s+(?:much\s+)?(?:prefer|rather)\b"
    r"|my\s+(?:(?:absolute|all-time)\s+)?(?:favou?rite|preferred|go-to)\s+\w+(?:\s+\w+){0,3}\s+(?:is|are)\b"
    r"|i\s+(?:always|never|only)\s+(?!said|say|told|asked|thought|wonder)\w+"
    r"|i\s+(?:can't stand|cannot stand|hate|dislike|detest|avoid)\b"
    r"|(?:please\s+)?(?:always|never)\s+(?:use|report|reply|answer|respond|write|format|show|give|keep|call|"
    r"address|include|add|put|sign|spell|quote|express|round|cite|mention|start|end|list|sort|default)\b"
    r"|from now on\b"
    r"|going forward\b"
    r"|in (?:the )?future,?\s+(?:please\s+)?(?:always|use|reply|answer|write|format)\b"
    r")",
    _FLAGS,
)
_PREFERENCE_WEAK = re.compile(
    r"^(?:(?:honestly|generally|personally|usually|also|and|but|oh|so),?\s+)*i\s+(?:really\s+)?(?:like|love|enjoy|adore)\s+"
    r"(?!(?:to know|to ask|to see|you|it when you|that you|your)\b)",
    _FLAGS,
)
_DECISION = re.compile(
    r"^(?:(?:so|ok(?:ay)?|alright|finally|and|also|after (?:some|much|a lot of) (?:discussion|thought|debate)),?\s+)*"
    r"(?:(?:we|i|the team|our team|my team|management|the company)(?:\s*'ve|\s+have|\s+has|\s+finally|\s+just|"
    r"\s+already|\s+now)*\s+"
    r"(?:decided|agreed|chose|chosen|settled|opted|committed|picked|selected|resolved|determined)\b"
    r"|(?:we|i)(?:'re| are| am|'m)\s+going\s+(?:with|to go with)\b"
    r"|(?:we|i)(?:'ll| will)\s+(?:go with|stick with|standardi[sz]e on)\b"
    r"|(?:the|our)\s+(?:final\s+)?decision\s+(?:is|was)\s+(?:to|that)\b"
    r"|it(?:'s| is| has been| was)\s+(?:been\s+)?decided\b)",
    _FLAGS,
)
_FACT_STRONG = re.compile(
    r"^(?:(?:also|and|but|oh|so|btw|by the way|fyi|for context|hi|hello|hey),?\s+)*(?:"
    r"my\s+(?:full\s+|first\s+|last\s+|nick)?name(?:'s| is)\b"
    r"|i(?:'m| am)\s+called\b|call me\s+[A-Z]"
    r"|i\s+(?:currently\s+|now\s+|still\s+)?(?:work|worked)\s+(?:at|for|in|on|as|with)\b"
    r"|i(?:'m| am)\s+(?:currently\s+)?(?:working|employed)\s+(?:at|for|as|on)\b"
    r"|i\s+(?:currently\s+|now\s+|still\s+)?(?:live|lived|reside|grew up|was born|moved)\s+(?:in|at|to|near|on)\b"
    r"|i(?:'m| am)\s+(?:originally\s+)?from\b"
    r"|i(?:'m| am)\s+(?:a|an)\s+(?:\w+\s+){0,3}(?:engineer|developer|designer|manager|teacher|nurse|doctor|"
    r"student|analyst|scientist|writer|lawyer|consultant|architect|researcher|administrator|admin|lead|"
    r"director|founder|owner|programmer|accountant|vegetarian|vegan|parent|father|mother|dad|mum|mom|"
    r"freelancer|contractor|intern|professor|chef|pilot|artist|photographer|musician|officer|specialist)\b"
    r"|i(?:'m| am)\s+allergic\b|i(?:'m| am)\s+\d+\s+years old\b"
    r"|my\s+(?:(?:wife|husband|partner|son|daughter|kid|child|children|dog|cat|manager|boss|team|company|"
    r"employer|project|team lead|colleague|sister|brother|mother|father|mom|dad|birthday|job|role|title|"
    r"email|timezone|time zone|office|address|home|car|laptop|phone|team's|company's|project's|"
    r"server|repo|repository|stack|language|os|editor|shell|setup)(?:'s)?(?:\s+\w+){0,2})\s+(?:is|are|was|were|'s)\b"
    r"|(?:our|my)\s+(?:team|company|project|startup|org|organi[sz]ation|department|group|stack|product|app|"
    r"service|codebase|office|backend|frontend)\s+(?:uses|use|runs|is|are|has|builds|ships|deploys|sells|"
    r"makes|targets|relies)\b"
    r"|we\s+(?:use|run|deploy|host|build|ship|store|keep)\s+\w+"
    r")",
    _FLAGS,
)
_EVENT = re.compile(
    r"^(?:(?:also|and|but|oh|so|btw|by the way|actually|well|yesterday|today|last \w+|recently),?\s+)*"
    r"(?:i|we|my (?:wife|husband|partner|family|team)(?: and i)?)(?:'ve|\s+have|\s+had)?\s+"
    r"(?:just\s+|recently\s+|finally\s+|already\s+|also\s+|actually\s+)?"
    r"(?:bought|purchased|got (?:a|an|my|the|our|new|married|engaged|promoted)|went|met|started|finished|took|made|"
    r"visited|adopted|joined|moved|sold|booked|ordered|received|attended|completed|graduated|signed up|"
    r"upgraded|switched|spent|paid|won|volunteered|painted|ran|hiked|baked|cooked|planted|redecorated|"
    r"renovated|celebrated|travel+ed|returned|picked up|set up|organi[sz]ed|hosted|launched|published|"
    r"been (?:working|learning|playing|taking|going|volunteering|training|using|reading|trying to learn))\b"
    r"(?!\s+(?:an? |the |my |this |that |it |some )?(?:error|bug|problem|issue|exception|warning|question|idea|"
    r"crash|stuck|confused|lost|tests?|build|command|script|code|docs?|documentation|migration|query|program|"
    r"server|job|pipeline|linter|compiler|through|over|getting|into|back|wrong|nowhere|it\b|that\b|this\b))",
    _FLAGS,
)
_FACT_WEAK = re.compile(
    r"^(?:(?:also|and|but|oh|so|btw|by the way),?\s+)*i\s+(?:use|own|have|drive|speak|run|maintain|"
    r"manage|lead|teach|study|studied|play|practi[sc]e)\s+(?!(?:a question|an idea|to|no|been|got|"
    r"some questions|trouble|an issue|a problem|this|that|it|you)\b)\w+",
    _FLAGS,
)


def sentences(text: str) -> Iterator[str]:
    """The input's sentences, whitespace-collapsed, list markers and closing punctuation trimmed."""
    for piece in _SENTENCE_END.split(text):
        sentence = collapse_whitespace(_EDGE.sub("", piece.strip()))
        if sentence:
            yield sentence


def _negated(sentence: str) -> bool:
    """A negated main verb: a negation among the first four words, before any comma ("I don't prefer…",
    "We have not decided…"; not "I prefer tea, not coffee")."""
    head = " ".join(sentence.split(",", 1)[0].split()[:4])
    return bool(_NEGATION.search(_NOT_NEGATIONS.sub("", head)))


def _non_statement(sentence: str, raw: str) -> bool:
    if raw.rstrip().endswith("?") or _QUESTION_START.match(sentence):
        return True
    if _HYPOTHETICAL.search(sentence) or _negated(sentence) or _REPORTED.search(sentence):
        return True
    if _QUOTES.search(raw) or (_YOU_SUBJECT.match(sentence) and not _DECISION.match(sentence)):
        return True
    return bool(_INSTRUCTION.match(sentence)) or bool(_CONTEXT_WORDS.search(sentence)) or ": " in raw


def classify(sentence: str) -> tuple[str, int] | None:
    """(kind, confidence) of a statement sentence, or ``None`` when it is not one."""
    if _DECISION.match(sentence):
        return "decision", CONFIDENCE
    if _PREFERENCE_STRONG.match(sentence):
        return "preference", CONFIDENCE
    if _FACT_STRONG.match(sentence):
        return "fact", CONFIDENCE
    if _EVENT.match(sentence):
        return "fact", EVENT_CONFIDENCE
    if _PREFERENCE_WEAK.match(sentence):
        return "preference", WEAK_CONFIDENCE
    if _FACT_WEAK.match(sentence):
        return "fact", WEAK_CONFIDENCE
    return None


# A statement inside narrative ("By the way, I've been keeping my old sneakers under my bed"): discourse
# lead-ins before the first-person clause, and the clause boundaries a first-person statement may follow.
_LEAD_IN = re.compile(
    r"^(?:(?:oh|and|also|so|well|anyway|actually|btw|by the way|incidentally|honestly|plus|funny enough|"
    r"on (?:a|another) (?:side|different) note|on that note|as it happens|speaking of [^,]{1,60}|"
    r"besides [^,]{1,60}|apart from [^,]{1,60}|other than that|in fact|for what it's worth|"
    r"just so you know|just to let you know|as for me|for me|personally),?\s+)+",
    _FLAGS,
)
_CLAUSE_BREAK = re.compile(
    r"(?:,|;|\s[-–—])\s+(?:and\s+|but\s+|so\s+)?(?=(?:i|i'm|i've|i'd|we|we've|we're|my)\b)", _FLAGS
)
_NARRATIVE_EVENT = re.compile(
    r"^(?:i|we|my (?:wife|husband|partner|family|friends?|kids|sister|brother|mom|mum|dad)(?: and i)?)"
    r"(?:'ve|\s+have|\s+had)?\s+"
    r"(?:(?:just|recently|finally|already|also|actually|even|once|since|lately|now)\s+)*"
    r"(?:caught|taken|sold|added|collected|saved|earned|scored|got|gotten|bought|received|adopted|"
    r"picked|tried out|visited|attended|completed|finished|joined|started|moved|booked|ordered|"
    r"been (?:keeping|going|doing|trying out|listening|watching|reading|practicing|practising|collecting|"
    r"cooking|baking|running|swimming|cycling|hiking|saving|planning|looking into|taking|attending|using|"
    r"working on|volunteering|learning|playing|visiting|seeing|spending|getting)"
    r"|been to|had (?:my|our|a|an|the)|kept|keep|spent|paid|won|lost|met|made|built|planted|grew|learned|learnt|"
    r"signed up|enrolled|registered|upgraded|replaced|redecorated|renovated|rescued|fostered|volunteered|"
    r"participated|competed|ran|hiked|cycled|swam|travel+ed|flew|drove|returned|went|came back|"
    r"got back|celebrated|hosted|organi[sz]ed|graduated|reached|hit|beat|broke|achieved|served|saw|see)\b"
    r"(?!\s+(?:an? |the |my |this |that |it |some )?(?:error|bug|problem|issue|exception|warning|question|idea|"
    r"crash|stuck|confused|lost|tests?|build|command|script|code|docs?|documentation|migration|query|program|"
    r"server|job|pipeline|linter|compiler|output|result|response|answer|message|link|article|post|video|"
    r"through|over|getting|into|back to you|wrong|nowhere|it\b|that\b|this\b|what|how|why|if|whether|you))",
    _FLAGS,
)
_PLAN = re.compile(
    r"^(?:i|we)(?:'m|'re| am| are)\s+(?:(?:currently|also|now|really|seriously)\s+)?"
    r"(?:planning|thinking of|considering|going to|about to|getting ready to|looking to|looking forward to|"
    r"saving up for|training for|preparing for)\s+"
    r"(?!(?:ask|paste|share|send|show|try (?:it|this|that)|run|use (?:it|this|that)|do (?:it|this|that)|"
    r"write|explain|say|describe|give|provide|start by|need|have to|look (?:at|into)|"
    r"check|test|debug|fix|refactor|deploy|implement|code|the code|this|that|it)\b)\w+"
    r"|^(?:i|we)\s+plan\s+to\s+\w+"
    r"|^(?:i|we)(?:'ve| have)\s+(?:just\s+)?(?:booked|scheduled|reserved|registered for|signed up for)\b",
    _FLAGS,
)
_PROBLEM = re.compile(
    r"\b(?:error|errors|bug|bugs|fails?|failed|failing|crash(?:es|ed)?|exception|traceback|stack trace|"
    r"doesn't work|broken|compile|segfault|timeout|stuck)\b",
    _FLAGS,
)
_QUOTED_SPEECH = re.compile(r"[\"“”«»„']\s*(?:i|i'm|i've|we|we're|my|our)\b|[\"“”«»„]\s*[,.]?\s*$", _FLAGS)
"""A quote of someone's first-person words ("“I prefer tea,” he wrote"); a quoted title ("the 'Dance for a
Cause' event") is not one."""
_NUMBER_FACT = re.compile(
    r"^my\s+(?:\w+\s+){1,3}(?:is|are|was|were)\s+(?:actually\s+|now\s+)?"
    r"(?:about\s+|around\s+|only\s+|just\s+)?[$£€]?\d",
    _FLAGS,
)
NARRATIVE_CONFIDENCE = EVENT_CONFIDENCE
"""A first-person event or fact found inside a longer narrative sentence."""
PLAN_CONFIDENCE = WEAK_CONFIDENCE
"""A plan ("I'm planning a week in Reykjavik", "I'm thinking of booking a barn"): it may not happen, so it is
below the events' confidence (a careful policy leaves it for review)."""


def _narrative(sentence: str, raw: str) -> Draft | None:
    """A first-person event or plan of the user's life inside narrative: lead-ins stripped, and the clauses
    after a comma, semicolon or dash tried in turn; the content is the sentence from that clause on."""
    if raw.rstrip().endswith("?") or _QUOTED_SPEECH.search(raw) or _PROBLEM.search(sentence):
        return None
    if _CONTEXT_WORDS.search(sentence) or _INSTRUCTION.match(sentence):
        return None
    starts = [0] + [found.end() for found in _CLAUSE_BREAK.finditer(sentence)]
    for start in starts:
        clause = _LEAD_IN.sub("", sentence[start:])
        if len(clause.split()) < MIN_WORDS or _QUESTION_START.match(clause):
            continue
        head = re.split(r"(?:,|;|\s[-–—])\s+", clause, maxsplit=1)[0]
        if _HYPOTHETICAL.search(head) or _negated(head) or _REPORTED.search(head):
            continue
        before = sentence[:start]  # "Hypothetically, I prefer…", "According to the docs, we use…"
        if _HYPOTHETICAL.search(before) or _REPORTED.search(before):
            continue
        if _YOU_SUBJECT.match(clause):
            continue
        planned = bool(_PLAN.match(clause))
        if planned or _NARRATIVE_EVENT.match(clause) or _NUMBER_FACT.match(clause) or (start and _EVENT.match(clause)):
            content = _LEAD_IN.sub("", sentence[start:] if start else sentence)
            confidence = PLAN_CONFIDENCE if planned else NARRATIVE_CONFIDENCE
            return Draft(kind="fact", content=content[0].upper() + content[1:], confidence=confidence)
        if start and not _non_statement(clause, clause):
            found = classify(clause)
            if found is not None:
                return Draft(kind=found[0], content=clause[0].upper() + clause[1:], confidence=found[1])
    return None


def _statement(raw: str) -> Draft | None:
    sentence = collapse_whitespace(_EDGE.sub("", raw.strip()))
    if len(sentence) > MAX_SENTENCE_CHARS or len(sentence.split()) < MIN_WORDS:
        return None
    remember = _REMEMBER.match(sentence)
    if remember is not None:
        body = _EDGE.sub("", remember.group("body"))
        if raw.rstrip().endswith("?") or _REPORTED.search(body) or _HYPOTHETICAL.search(body):
            return None
        if len(body.split()) < 2 or _negated(body):
            return None
        found = classify(body)
        kind = found[0] if found else "fact"
        return Draft(kind=kind, content=body[0].upper() + body[1:], confidence=CONFIDENCE)
    found = None if _non_statement(sentence, raw) else classify(sentence)
    if found is None:
        return _narrative(sentence, raw)
    return Draft(kind=found[0], content=sentence, confidence=found[1])


_PIECES = re.compile(
    r"\n+|(?<=[.!?])(?<!\bDr\.)(?<!\bMr\.)(?<!\bMs\.)(?<!\bMrs\.)(?<!\bSt\.)(?<!\bvs\.)"
    r"(?<!\bProf\.)(?<!\bJr\.)(?<!\bSr\.)(?<!\bMt\.)\s+(?=\S)"
)
"""Where the input is cut into sentences: line breaks, and . ! ? before a space but not after a title
("Dr. Smith", "Mt. Fuji")."""


def extract(text: str | None, max_candidates: int) -> list[Draft]:
    """The statement drafts of ``text`` in order, at most ``max_candidates``, secret-looking ones and
    duplicates (by kind and semantic key, ``extraction._dedupe``) dropped."""
    from learnings.extraction import _dedupe

    if not text or max_candidates <= 0:
        return []
    drafts: list[Draft] = []
    for piece in _PIECES.split(text):
        if not piece.strip():
            continue
        draft = _statement(piece)
        if draft is None or content_has_secret_material(draft.content):
            continue
        drafts.append(draft)
        if len(drafts) >= max_candidates:
            break
    return _dedupe(drafts)
