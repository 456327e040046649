"""The phrase banks of the synthetic two-person conversations (``benchmarks.conversations.synthesize``).

Two **disjoint** banks: ``dev`` (the one the mechanism was looked at and tuned on) and ``held_out`` (other life
topics, other wordings, other names, other filler): the figure of record is the held-out one. In both, a
question paraphrases its evidence — it names the category ("Which sports …", "What vehicle …") where the
evidence names the thing ("a five-a-side team", "a hatchback") — as LoCoMo's questions do.

A topic: ``say`` — first-person statements with slots (the evidence turn; one is drawn); ``ask`` — the
single-hop question about a speaker (``{who}``); ``slots`` — the values each slot draws from, distinct per
speaker so the other speaker's statement on the same topic is a distractor. ``kind``:

* ``single``: one statement per speaker, asked with ``ask``;
* ``multi``: ``say`` holds several *items* of one category (each speaker says two of them in different
  sessions); ``ask`` names the category: two evidence turns (multi-hop);
* ``repeat``: the speaker says it twice, in different months; ``ask`` takes ``{when}`` ("in May", "last
  month") and only the statement of that month is evidence (temporal);
* ``dated``: the statement names its own day relatively ("last Saturday", "yesterday"); ``ask`` takes
  ``{date}`` ("on 13 May 2023"), the day resolved against the session date (temporal, relative dates)."""

from __future__ import annotations

BANKS: dict[str, dict] = {
    "dev": {
        "names": ("Caroline", "Melanie", "Dana", "Joanna", "Nate", "Priya", "Oskar", "Amara", "Kenji", "Lina"),
        "topics": [
            {
                "id": "pet",
                "kind": "single",
                "say": [
                    "We finally brought home a {breed} from the rescue centre, and {pname} already owns the sofa.",
                    "Guess what, we adopted a little {breed} last week and called her {pname}!",
                ],
                "ask": ["What kind of dog did {who} take in?", "Which animal joined {who}'s household?"],
                "slots": {
                    "breed": ["beagle", "border collie", "dachshund", "greyhound", "spaniel", "corgi"],
                    "pname": ["Biscuit", "Pepper", "Mochi", "Rusty", "Juno", "Olive"],
                },
            },
            {
                "id": "job",
                "kind": "single",
                "say": [
                    "I handed in my notice, I start at {company} as a {role} in a few weeks.",
                    "I accepted the offer from {company}, so I'll be a {role} there from next month.",
                ],
                "ask": ["Where is {who} going to be employed next?", "What new position did {who} accept?"],
                "slots": {
                    "company": ["Brightwave", "Northwind Labs", "Cobalt Health", "Fernhill Bank", "Tandem Studio"],
                    "role": ["data analyst", "product designer", "sous chef", "project coordinator", "physiotherapist"],
                },
            },
            {
                "id": "car",
                "kind": "single",
                "say": [
                    "We traded in the old van for a {car}, it is so much quieter.",
                    "I finally replaced my rusty hatchback with a {car}.",
                ],
                "ask": ["What vehicle does {who} drive now?", "Which car did {who} end up buying?"],
                "slots": {
                    "car": [
                        "second-hand Volvo estate",
                        "small electric Renault",
                        "red Mazda convertible",
                        "Toyota hybrid",
                        "camper van",
                    ]
                },
            },
            {
                "id": "home",
                "kind": "single",
                "say": [
                    "We moved into a flat in {district}, it's tiny but gets the morning sun.",
                    "The boxes are finally unpacked in our new place near {district}.",
                ],
                "ask": ["Which neighbourhood does {who} live in these days?", "Where did {who} relocate to?"],
                "slots": {
                    "district": ["Riverside", "the old harbour", "Elm Park", "the university quarter", "Hillcrest"]
                },
            },
            {
                "id": "family",
                "kind": "single",
                "say": [
                    "My sister {sib} had a baby boy on Tuesday, so I'm officially an aunt!",
                    "Big news in the family: my brother {sib} and his wife welcomed twins.",
                ],
                "ask": ["Who in {who}'s family recently became a parent?", "Whose baby news did {who} share?"],
                "slots": {"sib": ["Rosa", "Tom", "Ines", "Marco", "Hannah", "Felix"]},
            },
            {
                "id": "study",
                "kind": "single",
                "say": [
                    "I enrolled in an evening course on {subject} at the community college.",
                    "Twice a week after work I'm in a night class about {subject} now.",
                ],
                "ask": ["What is {who} learning in the evenings?", "Which subject did {who} go back to school for?"],
                "slots": {
                    "subject": ["marine biology", "accounting", "Italian cooking history", "web design", "astronomy"]
                },
            },
            {
                "id": "sport",
                "kind": "multi",
                "say": [
                    "I joined a five-a-side football team that plays on Thursday nights.",
                    "I've started going to a bouldering gym near the office.",
                    "I signed up for tennis lessons at the park courts.",
                    "I swim forty lengths at the lido before work now.",
                    "I bought a road bike and ride with a club on Sundays.",
                ],
                "ask": ["Which sports has {who} taken up?", "What athletic activities is {who} into?"],
                "slots": {},
            },
            {
                "id": "cooking",
                "kind": "multi",
                "say": [
                    "I finally nailed my grandmother's paella recipe.",
                    "I baked sourdough from my own starter for the first time.",
                    "I made fresh ravioli by hand for the whole family.",
                    "I tried a Thai green curry from scratch and it turned out great.",
                    "I smoked a brisket for twelve hours on the weekend.",
                ],
                "ask": ["What dishes has {who} learned to make?", "What has {who} been cooking at home?"],
                "slots": {},
            },
            {
                "id": "trip",
                "kind": "repeat",
                "say": [
                    "We just got back from {days} days in {city}, the food there was incredible.",
                    "I spent a long weekend in {city} with my cousins, we walked everywhere.",
                ],
                "ask": ["Where did {who} travel {when}?", "Which city did {who} visit {when}?"],
                "slots": {
                    "days": ["four", "five", "six", "ten"],
                    "city": ["Lisbon", "Kyoto", "Marrakesh", "Prague", "Montreal", "Seville", "Oslo"],
                },
            },
            {
                "id": "concert",
                "kind": "repeat",
                "say": [
                    "We saw {band} play at the arena, my ears are still ringing.",
                    "I had front-row tickets for {band} and sang along to every song.",
                ],
                "ask": ["Which band did {who} see live {when}?", "What gig did {who} go to {when}?"],
                "slots": {
                    "band": [
                        "The Lumineers",
                        "Arctic Monkeys",
                        "Florence and the Machine",
                        "Coldplay",
                        "Fleetwood Mac tribute act",
                        "Haim",
                    ]
                },
            },
            {
                "id": "race",
                "kind": "dated",
                "say": [
                    "I ran the {race} {rel}, finished in just under {time}!",
                    "{rel_cap} I completed the {race}, my legs are still sore.",
                ],
                "ask": ["What did {who} do {date}?", "Which event did {who} take part in {date}?"],
                "slots": {
                    "race": ["city half marathon", "charity 10K", "trail ultra", "harbour fun run"],
                    "time": ["two hours", "fifty minutes", "six hours", "forty minutes"],
                },
            },
            {
                "id": "volunteer",
                "kind": "single",
                "say": [
                    "I spent Saturday morning sorting donations at the {org}.",
                    "I help out at the {org} every other weekend now.",
                ],
                "ask": ["Where does {who} volunteer?", "Which charity does {who} give time to?"],
                "slots": {
                    "org": [
                        "food bank on Mill Street",
                        "animal shelter",
                        "youth football club",
                        "hospice shop",
                        "refugee welcome centre",
                    ]
                },
            },
        ],
        "filler": [
            "How have you been? It feels like ages since we caught up.",
            "Work has been hectic, three deadlines landed in the same week.",
            "The weather was lovely, we sat outside most evenings.",
            "That sounds amazing, I'm really happy for you!",
            "Haha, that's so typical of you.",
            "I've been binge-watching a detective series, it's oddly relaxing.",
            "My commute was a nightmare today, the trains were all delayed.",
            "Do you remember that café we used to go to? It closed down.",
            "I need to get more sleep, honestly.",
            "Thanks for asking, things are calm for once.",
            "Wow, I didn't expect that at all.",
            "We should plan something together soon.",
            "The kids have a school play next month, chaos at home.",
            "I tried meditating but my mind kept wandering.",
            "Anyway, enough about me, what's new with you?",
            "That reminds me of the summer we spent at the lake.",
            "I'm proud of you, that took courage.",
            "Ugh, my phone screen cracked again.",
            "We had friends over for dinner, it went late.",
            "Sounds like a good plan, keep me posted.",
        ],
    },
    "held_out": {
        "names": ("Audrey", "Gina", "Jon", "Maria", "Evan", "Sam", "Deborah", "Andrew", "Tim", "John"),
        "topics": [
            {
                "id": "garden",
                "kind": "single",
                "say": [
                    "I planted {veg} in the raised beds behind the house.",
                    "This spring the allotment is all {veg}, I'm out there every evening.",
                ],
                "ask": ["What is {who} growing?", "What did {who} put in the vegetable patch?"],
                "slots": {"veg": ["tomatoes and courgettes", "potatoes", "runner beans", "strawberries", "garlic"]},
            },
            {
                "id": "book",
                "kind": "single",
                "say": [
                    "Our book club chose {book} and I stayed up until two finishing it.",
                    "I finally read {book}, the ending wrecked me.",
                ],
                "ask": ["Which novel did {who} get through recently?", "What was {who}'s latest read?"],
                "slots": {
                    "book": ["Piranesi", "The Remains of the Day", "Circe", "Station Eleven", "A Gentleman in Moscow"]
                },
            },
            {
                "id": "injury",
                "kind": "single",
                "say": [
                    "I twisted my ankle {how}, so it's six weeks in a brace.",
                    "I broke my wrist {how}, typing with one hand is slow.",
                ],
                "ask": ["How did {who} get hurt?", "What accident happened to {who}?"],
                "slots": {
                    "how": [
                        "on the office stairs",
                        "skiing in the Alps",
                        "falling off a ladder",
                        "playing netball",
                        "slipping on ice",
                    ]
                },
            },
            {
                "id": "promotion",
                "kind": "single",
                "say": [
                    "They made me head of {dept}, I'm managing eight people now.",
                    "I got the promotion, I'm now leading the {dept} team.",
                ],
                "ask": ["What role was {who} moved up to?", "Which team does {who} run now?"],
                "slots": {
                    "dept": ["radiology", "customer support", "logistics", "the pastry section", "quality assurance"]
                },
            },
            {
                "id": "renovation",
                "kind": "single",
                "say": [
                    "We ripped out the old kitchen and put in {material} worktops.",
                    "The bathroom is finished at last, we went with {material} everywhere.",
                ],
                "ask": ["What did {who} change in the house?", "How did {who} redo the home?"],
                "slots": {"material": ["oak", "green tiles", "marble", "concrete", "reclaimed pine"]},
            },
            {
                "id": "diet",
                "kind": "single",
                "say": [
                    "I've gone fully {diet} since the new year and I feel great.",
                    "I cut out meat and I've been {diet} for three months.",
                ],
                "ask": ["What change did {who} make to eating habits?", "How does {who} eat now?"],
                "slots": {"diet": ["vegetarian", "vegan", "pescatarian"]},
            },
            {
                "id": "instrument",
                "kind": "multi",
                "say": [
                    "I bought a second-hand cello and take lessons with a retired teacher.",
                    "I've been practising the ukulele every evening.",
                    "I joined a community choir as a tenor.",
                    "I dusted off my old trumpet and play in a brass band now.",
                    "I'm teaching myself the piano with an app.",
                ],
                "ask": ["Which instruments is {who} learning?", "What music does {who} make?"],
                "slots": {},
            },
            {
                "id": "craft",
                "kind": "multi",
                "say": [
                    "I knitted a scarf for my dad, my first finished piece.",
                    "I started a pottery class and threw my first bowl.",
                    "I built a bookshelf in the garage out of scrap wood.",
                    "I've been sewing my own summer dresses.",
                    "I made a stained-glass panel for the front door.",
                ],
                "ask": ["What crafts does {who} do in spare time?", "What has {who} made by hand?"],
                "slots": {},
            },
            {
                "id": "holiday",
                "kind": "repeat",
                "say": [
                    "We rented a cabin by {place} for a week, no phone signal at all.",
                    "I took the kids camping at {place}, it rained every night.",
                ],
                "ask": ["Where did {who} stay on holiday {when}?", "Where did {who} go away {when}?"],
                "slots": {
                    "place": [
                        "Lake Bled",
                        "the Lake District",
                        "Loch Ness",
                        "Lake Tahoe",
                        "Bryce Canyon",
                        "the Black Forest",
                    ]
                },
            },
            {
                "id": "exhibition",
                "kind": "repeat",
                "say": [
                    "I went to the {artist} retrospective at the national gallery.",
                    "We queued an hour for the {artist} exhibition, worth it.",
                ],
                "ask": ["Which art show did {who} visit {when}?", "What museum exhibit did {who} see {when}?"],
                "slots": {"artist": ["Hockney", "Frida Kahlo", "Van Gogh", "Yayoi Kusama", "Rothko", "Turner"]},
            },
            {
                "id": "wedding",
                "kind": "dated",
                "say": [
                    "My best friend {friend} got married {rel}, I gave a speech.",
                    "{rel_cap} I was at {friend}'s wedding, we danced until midnight.",
                ],
                "ask": ["Whose wedding did {who} attend {date}?", "Which celebration was {who} at {date}?"],
                "slots": {"friend": ["Chloe", "Rahul", "Beth", "Luis", "Mei"]},
            },
            {
                "id": "fostering",
                "kind": "single",
                "say": [
                    "We're fostering {animals} from the shelter until they find homes.",
                    "The house is full of {animals} we're looking after for the shelter.",
                ],
                "ask": ["What animals is {who} caring for?", "Which creatures is {who} temporarily housing?"],
                "slots": {"animals": ["two kittens", "a litter of puppies", "three rabbits", "an elderly greyhound"]},
            },
        ],
        "filler": [
            "Long time no see, how's everything going?",
            "It's been pouring for days, I've forgotten what the sun looks like.",
            "I'm so glad you told me, that's great news.",
            "Honestly the week flew by.",
            "My inbox is out of control.",
            "We ordered pizza and watched an old film, a quiet night.",
            "Lol, you always say that.",
            "The neighbours are having their roof done, the noise is unbelievable.",
            "Let's grab coffee when things calm down.",
            "I keep meaning to call my mum more often.",
            "No way, really?",
            "That must have been exhausting.",
            "The traffic on the ring road was horrendous this morning.",
            "Did you see the match on Sunday? What a finish.",
            "I'm trying to drink less coffee, it's not going well.",
            "Fair enough, I'd probably do the same.",
            "Tell me everything when you have a minute.",
            "The heating broke again, landlord says next week.",
            "I found my old diary from school, so embarrassing.",
            "Good luck, I'll be thinking of you.",
        ],
    },
}
