"""Word families that make a memory personal: health, money, family, beliefs, the law.

    >>> [reason for reason, rule in WORD_RULES if rule.search("i'm on blood thinners")]
    ['health information']

Each rule is a regex over the case-folded text with accents removed (``médicament`` is
read ``medicament``; ``pml.memory.personal_data`` prepares it, runs the rules and decides
when a match is about software instead). Rules are families, not sentences: stems
(``diabet`` finds diabetes, diabète, Diabetes), words in a few languages (English first,
then French, Spanish and German), and short constructions ("we still owe", "behind on
... payments", "my son is 7", "on a work visa", "of Pakistani descent"). Phrases that are
ordinary in software stay out: ``health check``, ``race condition``, ``child process``,
``passport.js``, ``free trial``, ``genetic algorithm``, ``the battery was charged``.
Every pattern runs in linear time: bounded repetitions, no nested ambiguity.
"""

from __future__ import annotations

import re
from typing import Final


def words(alternatives: str) -> str:
    """Whole words or phrases: ``alternatives`` is a regex alternation (``a|b c|d``)."""
    return rf"\b(?=[a-z0-9])(?:{alternatives})\b"


def stems(alternatives: str) -> str:
    """Words starting with one of the ``|``-separated stems (``diabet`` finds diabetes)."""
    return rf"\b(?=[a-z0-9])(?:{alternatives})\w{{0,24}}"


RELATION: Final = (
    r"(?:wife|husband|partner|spouse|girlfriend|boyfriend|fiancee?|ex|mom|mum|mother|dad"
    r"|father|parents?|son|daughter|kids?|child|brother|sister|sibling|aunt|uncle|cousin"
    r"|grandma|grandpa|grandmother|grandfather|niece|nephew|friend|boss|colleague|coworker"
    r"|co-worker|neighbou?r|landlord|landlady|doctor|therapist|lawyer|dentist|nanny"
    r"|babysitter|roommate|flatmate|in-laws?|step(?:mom|mum|dad|son|daughter))"
)
_CONTACT_THING = r"(?:number|phone|cell|mobile|e-?mail|address|birthday|whatsapp|contact)"
_CHILD = (
    r"(?:sons?|daughters?|kids?|children|child|toddlers?|bab(?:y|ies)|twins|boys?|girls?"
    r"|teen(?:ager)?s?|step(?:son|daughter|kid)s?|grand(?:son|daughter|child|children)s?"
    r"|fils|filles?|enfants?|hij[oa]s?|nin[oa]s?|sohn|sohne|tochter|tochter|kinder)"
)
_POSSESSIVE = r"(?:my|our|his|her|their|mon|ma|mes|mi|mis|mein|meine|meinen|unser|unsere)"
_CHILD_DETAIL = (
    r"\d{1,2}|names?|named|called|school|nursery|daycare|kindergarten|pre-?school|primary"
    r"|secondary|elementary|middle school|high school|teacher|class|grade|year \d|born"
    r"|birthday|aged?|years? old|months? old|turn(?:s|ed)|goes to|attends|ecole|colegio"
    r"|escuela|schule|kita|ans|anos|jahre"
)
_NOT_A_CHILD = (
    r"process|thread|node|element|component|widget|item|window|task|job|span|entity|record"
    r"|table|row|object|theme|class|module|view|step|sitter|boomer|monitor"
)

_HEALTH_STEMS = (
    "diabet|asthma|allerg|alergi|medicat|medicament|medikament|medicac|antidepress|depressi"
    "|depresi|adhd|autis|asperger|bipolar|schizo|ptsd|therap|terap|psychiatr|psiquiatr"
    "|psycholog|psicolog|pregnan|enceinte|embarazad|schwanger|miscarr|abortion|chemo|oncolog"
    "|cancer|tumou?r|leuk(?:a)?emi|hypertens|cholesterol|insulin|epilep|seizure|migraine"
    "|dementia|alzheimer|parkinson|arthrit|coeliac|celiac|intoleran|disabilit|wheelchair"
    "|dyslexi|insomnia|anorexi|bulimi|suicid|infertil|contracept|menopaus|menstrua|hepatitis"
    "|thyroid|eczema|psoriasis|vaccinat|alcoholi|addict|rehab|hospital|hopital|krankenhaus"
    "|clinic|surgery|surgeon|dentist|dental|medical|medico|medecin|arzt|krank|maladi"
    "|malade|enfermedad|enferm[oa]|ansiedad|anxiet|angststor|injur|sertraline|fluoxetine"
    "|prozac|zoloft|lexapro|citalopram|escitalopram|xanax|alprazolam|valium|diazepam"
    "|adderall|ritalin|methylphenidate|metformin|ozempic|wegovy|semaglutide|levothyroxine"
    "|lisinopril|atorvastatin|ibuprofen|paracetamol|acetaminophen|oxycodone|morphine"
    "|methadone|suboxone|penicillin|amoxicillin|antibiotic|antihistamin|antipsychotic"
    "|anticoagul|warfarin|steroid|epipen|inhaler|anaphyla|counsell?or|counsell?ing|nause"
    "|vomit|overdos|p(?:a|ae)ediatric|obstetric|pacemaker|tinnitus|stammer|dialysis"
    "|transplant|biops|mammogra|colonoscop|endoscop|concussion|fractur|pneumonia|bronchitis"
    "|herpes|chlamydia|syphilis|gonorrh|\\w{3,20}itis\\b"
    "|(?:cardi|neur|dermat|gyn(?:a|ae)?ec|ur|onc|endocrin|gastroenter|rheumat|immun|ophthalm"
    "|audi|radi|h(?:a|ae)?emat|nephr|pulmon)ologist"
)
_HEALTH_WORDS = (
    r"diagnos(?:ed|is|es|e)|diagnostiqu\w{0,4}|diagnostica\w{0,6}|diagnostiziert|depressed"
    r"|anxiety|ocd|hiv|sexually transmitted|ivf|fertility|birth control|on the pill"
    r"|(?:sleeping|birth control) pills|hormones?|testosterone|o?estrogen"
    r"|mental (?:health|illness)|(?:my|his|her|sexual) health"
    r"|health (?:condition|issues?|problems?|insurance|records?|scare)|illness(?:es)?"
    r"|diseases?|disorders?|syndrome|chronic \w+|suffer(?:s|ed|ing)? (?:from|with)"
    r"|(?:back|neck|chest|joint|knee|hip|shoulder|stomach|nerve|ear|leg|arm) (?:pain|ache)"
    r"|blood (?:pressure|sugar|tests?|type|group|work|thinners?|clots?|transfusion)"
    r"|heart (?:attack|condition|disease|surgery|failure)|(?:had|have) a stroke"
    r"|sleep apno?ea|hearing aids?|bmi|meds|prescription|prescribed|covid|flu|infections?"
    r"|sick (?:leave|note|day)|(?:i'm|i am|i've been|been) (?:sick|ill|unwell)"
    r"|(?:my|the|a|his|her) doctor|doctor'?s (?:appointment|note|visit)|gp appointment"
    r"|check-?up|sober|relapsed?|self[- ]harm|eating disorder|\d+(?:\.\d+)? ?(?:mg|mcg|µg|μg)"
    r"|panic attacks?|(?:expecting|having) (?:a baby|twins)|(?:maternity|paternity) leave"
    r"|nurse|emergency room|a&e|ambulance|broke my \w+|an x-?ray|mri|physio|burn-?out"
    r"|(?:mental|nervous) breakdown|fever|cough(?:ing)?|(?:hearing|vision) loss"
    r"|(?:am|is|are|i'm|went|colou?r) (?:blind|deaf)|my (?:weight|height|bmi)"
    r"|(?:i|he|she) (?:\w+ )?weigh(?:s|ed)? (?:about |around |over |under )?\d"
    r"|weigh(?:s|ed)? (?:about |around )?\d+ ?(?:kg|kilos|lbs?|pounds|stone)"
    r"|(?:lose|lost|gain|gained|losing|gaining) (?:\d+ ?(?:kg|kilos|lbs?|pounds|stone)|weight)"
    r"|(?:hiv|covid) (?:positive|negative)"
)
_MONEY = (
    r"(?:[$€£¥] ?\d[\d,.]{0,12}(?: ?(?:k|m|bn|million|grand))?"
    r"|\d[\d,.]{0,12} ?(?:grand|euros?|eur|dollars?|bucks|usd|pounds|quid|gbp|chf|francs?"
    r"|k(?= ?(?:$|[.,;!)/]|a |per |before|after|gross|net|pre|annual|salary|debt"
    r"|bonus|in |on |of |from |total))))"
)
_FINANCE = (
    r"salar(?:y|ies)|pay ?checks?|pay ?slips?|wages?|income|net worth|debts?|in debt|loans?"
    r"|mortgages?|overdraft|bankrupt(?:cy)?|alimony|credit (?:score|rating|report|history|limit)"
    r"|(?:bank|account|savings) balance|(?:my|our|in) savings|savings account|pension"
    r"|401\(?k\)?|retirement (?:fund|account|savings)|tax(?:es)?|tax (?:return|bill|refund)"
    r"|irs|hmrc|investments?|stock portfolio|(?:my|our) (?:stocks|shares|portfolio)"
    r"|(?:an|my|the) inheritance|inherited (?:money|a house|property|[$€£]|\d)|child support"
    r"|(?:my|our|the) rent|(?:i|we|he|she|they) (?:\w+ )?(?:owe|owes|owed)|owed|finances"
    r"|financial|(?:life|car|home) insurance|(?:crypto|bitcoin) wallet"
    r"|my (?:\w+ )?(?:payments|bills)|behind on (?:\w+ ){0,2}(?:rent|payments|bills)"
    r"|our (?:car|rent|loan|mortgage|card|monthly|medical|utility) (?:payments|bills)"
    r"|laid off|unemploy\w{0,8}|(?:welfare|unemployment|disability|housing|child) benefits"
    r"|food stamps|payday loans?|paid off (?:my|our|the) (?:loan|mortgage|debt|car|card)"
    r"|(?:i'm|i am|we're|we are) broke|(?:my|our) bank|(?:gross|net) pay"
    r"|(?:my|his|her|their) (?:[\w-]+ ){0,2}(?:pay|bonus|income|earnings|compensation|budget)"
    r"|pay (?:rise|raise|cut|grade|band)|(?:raise|rise|bump) to " + _MONEY + r"|per annum"
    r"|(?:i|we|he|she|they) (?:\w+ )?(?:earn|earns|earned|make|makes|made|take home|bring in"
    r"|clear|net|gross|get paid|got paid|am paid|is paid|'m paid|saved|inherited|borrowed)"
    r" (?:about |around |roughly |over |under |nearly |almost |just |only )?"
    + _MONEY
    + r"|salaires?|salari(?:o|e)s?|sueldos?|gehalt|gehalter|lohn|einkommen|revenus"
    r"|ingresos|dettes?|deudas?|schulden|hypotheques?|hipotecas?|hypothek|loyer"
    r"|alquiler|miete|epargne|ahorros|ersparnisse|impots|impuestos|steuern"
    r"|(?:euros?|dollars?) (?:brut|bruts|nets?|brutto|netto)"
)
_PARTY = (
    r"labour|conservatives?|tor(?:y|ies)|lib ?dems?|liberal democrats?|greens?|reform|ukip"
    r"|snp|democrats?|democratic party|republicans?|gop|maga|afd|spd|cdu|csu|fdp|die linke"
    r"|grunen|rassemblement national|front national|france insoumise|psoe|podemos|vox"
    r"|trump|biden|harris|sanders|corbyn|starmer|farage|macron|le pen|melenchon"
)
_VISA_KIND = (
    r"work|tourist|student|spouse|spousal|skilled worker|family|residence|travel|business"
    r"|transit|golden|partner|fiancee?|working holiday|h-?1b|l-?1|o-?1|f-?1|j-?1|e-?2"
    r"|tier \d|schengen|k-?1|settlement|temporary|permanent|visitor"
)
_ID_NAMES = (
    r"passport|passeport|pasaporte|reisepass|licen[cs]e|ssn|nino|ni|social security"
    r"|social|national insurance|national id|id card|identity card|cpf|curp|dni|nie|nif"
    r"|sin|pesel|nric|hkid|pps number|cnp|egn|oib|amka|rut|ird number|cedula"
    r"|tfn|itin|steuer-?id|steuernummer|tax (?:file |id )?|nhs|medicare|medicaid|aadhaa?r"
    r"|pan card|personnummer|bsn|codice fiscale|(?:my|his|her) (?:personal |national |tax "
    r"|insurance |member(?:ship)? |patient |customer |employee |student |voter |citizen )?id"
)

# (reason, regex over the case-folded text without accents)
_SOURCES: Final[tuple[tuple[str, str], ...]] = (
    (
        "payment card details",
        words(
            r"card (?:number|no\.?|details|pin)|(?:credit|debit|bank|payment) cards?|cvv2?"
            r"|cvc2?|card security code|(?:my|card|bank|atm|debit|credit|sim|phone) pin"
            r"|pin (?:code|number)|(?:visa|mastercard|amex|american express)"
            r" (?:card|ending|number)|numero de (?:carte|tarjeta)|kartennummer"
        ),
    ),
    (
        "a bank account number",
        words(
            r"iban|bic|swift code|routing (?:number|no\.?)|sort code"
            r"|bank (?:account|details|statement)|account (?:number|no\.?)"
            r"|numero de (?:compte|cuenta)|kontonummer|bankverbindung"
        ),
    ),
    (
        "a national id number",
        words(
            r"social security|ssn|national insurance|social insurance|national id(?:entity)?"
            r"|id card|identity (?:card|number|document)"
            r"|passport (?:number|no\.?|id|details|expir\w{0,8}|photo|scan)"
            r"|(?:my|his|her|their) passport|driv(?:er'?s?|ing) licen[cs]e"
            r"|tax (?:id|identification|number|code|file number)|nhs number|medicare number"
            r"|aadhaa?r|personnummer|numero de securite sociale|sozialversicherungsnummer"
            r"|steuer-?id|steuernummer|personalausweis|carte (?:d'identite|vitale)"
            r"|permis de conduire|fuhrerschein|codice fiscale"
        )
        + rf"|\b(?:{_ID_NAMES})(?: (?:card|no\.?|number|num|nr\.?|nummer|numero|#))?"
        r"(?: (?:is|es|est|ist|e))?[ :#=]{1,3}(?=(?:[a-z]{0,6}[ \-./]?\d){5})",
    ),
    (
        "a date of birth",
        words(
            r"date of birth|d\.?o\.?b|birth ?date|birthdays?|born (?:on|in)"
            r"|(?:i am|i'm) \d{1,3} years? old|nee? le|nacid[oa] el|geboren am"
            r"|date de naissance|fecha de nacimiento|geburtsdatum|cumpleanos|anniversaire"
            r"|geburtstag"
        ),
    ),
    (
        "a phone number",
        words(
            r"(?:phone|cell|mobile|telephone|landline) (?:number|no\.?)"
            r"|(?:mon|ton|son) (?:numero de )?(?:portable|telephone|tel)"
            r"|mi (?:numero de )?(?:movil|celular|telefono)"
            r"|(?:meine|seine|ihre) (?:handy|telefon)nummer"
        ),
    ),
    (
        "someone's contact details",
        "|".join(
            (
                words(r"contact (?:details|info|information|number)"),
                rf"\b(?=[a-z]){RELATION}(?:'s|s')? (?:\w+ ){{0,2}}{_CONTACT_THING}\b",
                rf"\b(?=[a-z]){_CONTACT_THING} (?:number |address )?(?:of|for) (?:my|his|her) "
                rf"{RELATION}\b",
                words(r"(?:call|text|reach|email|e-mail) (?:me|him|her|them) (?:at|on)"),
            )
        ),
    ),
    (
        "where someone lives",
        words(
            r"(?:i|we|he|she|they) (?:live|lives|living|reside|resides)"
            r" (?:in|at|on|near|close to|next to)"
            r"|(?:i'm|i am|we're|we are) (?:staying|living) (?:in|at)"
            r"|(?:my|our|his|her|their) (?:home |postal |mailing |street |new |old )?address"
            r"|(?:home|postal|mailing|street|shipping|billing|delivery|residential) address"
            r"|(?:zip|post|postal) ?code"
            r"|(?:my|our) (?:house|flat|apartment|home) is (?:at|in|on)"
            r"|(?:my|our|the) hotel room|my (?:current |exact )?location"
            r"|where i (?:am|live) right now|j'habite|nous habitons|je vis (?:a|en)"
            r"|viv(?:o|imos) en|ich wohne|wir wohnen|mon adresse|mi direccion|meine adresse"
        ),
    ),
    (
        "information about a child",
        rf"\b(?=[hmotu]){_POSSESSIVE}(?: [\w-]+)? {_CHILD}\b(?:'s|s'|')?"
        rf"(?! (?:{_NOT_A_CHILD})(?:s|es)?\b)"
        rf"[^.\n]{{0,60}}?\b(?:{_CHILD_DETAIL})\b",
    ),
    ("health information", f"{stems(_HEALTH_STEMS)}|{words(_HEALTH_WORDS)}"),
    ("financial information", words(_FINANCE)),
    (
        "religious beliefs",
        words(
            r"religio(?:n|ns|us)|christians?|catholics?|protestants?|evangelicals?|muslims?"
            r"|islam(?:ic)?|jewish|judaism|jews?|hindus?|hinduism|buddhis[mt]s?|sikhs?"
            r"|atheists?|agnostic|mormons?|jehovah'?s? witness(?:es)?|church|mosque"
            r"|synagogue|gurdwara|pray(?:s|ed|ing)?|prayers?|ramadan|halal|kosher|bible"
            r"|qur'?an|koran|torah|sunni|shi'?a|shiite|baptists?|methodists?|lutherans?"
            r"|anglicans?|presbyterians?|pentecostals?|quakers?|born-again|pagans?|wiccans?"
            r"|scientolog\w{0,4}|latter-day saints|rastafari\w{0,3}|taoists?|zoroastrian"
            r"|baha'i|my faith|(?:go|goes|went|going|attend|attends) to (?:mass|confession"
            r"|temple|services)|(?:sunday|friday) (?:mass|prayers?|services)"
            r"|catholique|catolic[oa]|katholisch|musulman[ea]?|juif|juive|judi[oa]|judisch"
            r"|chretien(?:ne)?|cristian[oa]|christlich|athee|ate[oa]|evangelisch|bouddhiste"
            r"|budista|hindou|moslem|muslimisch|kirche|eglise|iglesia|moschee|mosquee|mezquita"
            r"|sinagoga|synagoge"
        ),
    ),
    (
        "political opinions",
        words(
            r"politics|political"
            rf"|vot(?:e|ed|ing|ers?) (?:for |against )?(?:the )?(?:{_PARTY})"
            rf"|(?:{_PARTY}) (?:voter|supporter|member|activist)s?"
            r"|democrats?|republicans?|labour party|tor(?:y|ies)"
            r"|conservative party|liberal democrats?|green party|party member(?:ship)?"
            r"|member of the \w+ party|socialists?|communists?|libertarians?|(?:left|right)-wing"
            r"|trade unions?|union member(?:ship)?|activists?|je vote|ich wahle|yo voto"
            r"|(?:i'm|i am|he's|she's) an? (?:\w+ )?(?:leftist|marxist|anarchist|centrist"
            r"|progressive|liberal|conservative)"
        ),
    ),
    (
        "sexual orientation or gender identity",
        words(
            r"gay|lesbian|bisexual|homosexual|heterosexual|queer|transgender"
            r"|trans (?:woman|man|person)|non-?binary|asexual|pansexual|lgbt\w{0,6}"
            r"|(?:came|coming|come) out (?:as|to)|not out (?:at|to)|sexual orientation"
            r"|sexuality|gender identity|sex life|same-sex|(?:my|his|her|their) pronouns"
            r"|pronouns are|(?:i|we) use (?:she/her|he/him|they/them|xe/xem|ze/zir)"
            r"|(?:i'm|i am|he's|she's|they're) (?:\w+ )?transitioning(?! to| from| the| our| a)"
            r"|(?:wife|husband|girlfriend|boyfriend|partner|spouse)(?: [\w']+){1,5}"
            r" both (?:men|women|guys|girls|male|female)"
            r"|homosexuel(?:le)?|lesbienne|bisexuel(?:le)?|schwul|lesbisch|lesbiana"
        ),
    ),
    (
        "a criminal record or legal matter",
        words(
            r"criminal record|convicted|convictions?|arrested|prison|in jail|jail time"
            r"|went to jail|probation|parole|dui|dwi|felony|misdemeanou?r|sued|suing"
            r"|lawsuit|(?:my|our|his|her) (?:lawyer|attorney|solicitor|barrister)"
            r"|(?:i|he|she|they|we) (?:was|were|got|am|is|are|have been|'ve been) charged with"
            r"|(?:court|tribunal) (?:case|hearing|appearance|order|date|summons)|summons"
            r"|(?:appear|appearing|appeared|be|been|go|going|went|was|were) (?:in|to) court"
            r"|magistrates'?|crown court|small claims|(?:my|his|her) trial|jury"
            r"|trial (?:starts|begins|date|is set)|pleaded (?:guilty|not guilty)|on bail"
            r"|(?:speeding|parking|traffic|driving) (?:tickets?|fines?|charges?|offen[cs]es?)"
            r"|indicted|acquitted"
            r"|(?:being|been|was|were|got) (?:sued|prosecuted)|restraining order"
            r"|casier judiciaire|antecedentes penales|vorstrafe\w{0,2}"
        ),
    ),
    (
        "personal circumstances",
        words(
            r"divorc\w{0,6}|(?:we|i) (?:separated|split up)|custody|widow(?:ed|er)?"
            r"|(?:i'm|i am|he's|she's) (?:now )?separated|(?:we're|we are) separated(?! by)"
            r"|(?:and i|we|we're) (?:are |have |had |just |recently )?(?:separating|splitting up"
            r"|breaking up|broken up|broke up)(?! (?:the|our|concerns|it|this|that|them)\b)"
            r"|(?:i|he|she) (?:was|got|am|is) (?:fired|sacked|dismissed)|disciplinary"
            r"|(?:sued|suing) (?:me|us|him|her)|(?:my|our) lawsuit"
            rf"|(?:my|our) (?:\w+ )?{RELATION} (?:\w+ ){{0,2}}(?:passed away|died)"
            r"|passed away|funeral|bereave\w{0,6}|grieving|in mourning"
        ),
    ),
    (
        "ethnic origin or immigration status",
        words(
            r"ethnicity|ethnic|immigration status|undocumented|asylum|mixed race|biracial"
            r"|multiracial|(?:my|his|her) race"
            r"|(?:i'm|i am|he's|she's|we're|they're) of (?:\w+ ){1,2}"
            r"(?:descent|heritage|ancestry|extraction)"
            r"|(?:my|his|her) (?:\w+ )?(?:roots|heritage|ancestry|origins)"
            r"|indigenous|aboriginal|first nations"
            r"|(?:i'm|i am|he's|she's|we're|they're|(?:my|his|her) \w+ (?:is|was))"
            r" (?:half|part|a quarter) [a-z]{2,20}(?:an|ese|ish|ic|i|ch)"
            rf"|(?:{_VISA_KIND}) visas?|(?:my|his|her) visa"
            r"|visa (?:expir\w{0,4}|applications?|refus\w{0,4}|denied|renewal|sponsorship"
            r"|status|interview|extension)"
            r"|residence permit|residency (?:permit|status|card|application)|work permit"
            r"|citizenship (?:application|test|ceremony)|naturali[sz]\w{0,6}|refugees?"
            r"|deport\w{0,6}|immigra\w{0,6}|illegal(?:ly)? (?:immigrant|alien)s?"
            r"|overstay\w{0,4}|leave to remain|(?:pre-)?settled status|titre de sejour"
            r"|sans-papiers|permiso de (?:residencia|trabajo)|aufenthalt\w{0,12}"
            r"|einburgerung|asyl\w{0,8}"
        ),
    ),
    (
        "biometric or genetic data",
        words(
            r"my fingerprints?|biometrics?|retina scan|voice ?prints?|face ?prints?"
            r"|(?:iris|face|facial|palm|hand|vein) (?:scan|template|print|geometry|data)s?"
            r"|facial recognition"
            r"|fingerprint (?:template|scan|data)s?"
            r"|(?:dna|genetic|genome) (?:test|results?|data|profile|sequenc\w{0,5})s?"
            r"|my (?:dna|genome|genes)|23andme"
        ),
    ),
)

WORD_RULES: Final[tuple[tuple[str, re.Pattern[str]], ...]] = tuple(
    (reason, re.compile(pattern)) for reason, pattern in _SOURCES
)
