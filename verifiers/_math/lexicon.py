r"""The words a conclusion is read by, in the languages models answer in: English, Chinese,
French, German, Spanish, Portuguese, Russian, Japanese (and Italian and Korean, which cost a
line each). Each table is one regex alternative per language, so adding a language is adding
a line to each table; the readers (extract.py, conclusion.py, sections.py) never name a word.

Chinese and Japanese have no spaces, so their words are matched without \b; every other
language's are whole words (Python's \b is Unicode-aware: "réponse", "ответ").
"""

from __future__ import annotations

import re


def _words(*alternatives: str, cjk: str = "") -> str:
    """One alternation: `alternatives` as whole words, `cjk` (already an alternation) as is."""
    out = r"\b(?:" + "|".join(alternatives) + r")\b"
    return f"(?:{out}|{cjk})" if cjk else out


# a marker that states the answer, ending where the answer starts ("the answer is", "答案是")
ANSWER_MARKERS = "|".join([
    # fr
    r"\b(?:la\s+)?(?:bonne\s+)?r[ée]ponse(?:\s+finale)?\s*(?:est|sera|vaut|:|=)|\br[ée]ponse\s+finale\b",
    # de
    r"\b(?:die\s+)?(?:richtige\s+|endg[üu]ltige\s+)?antwort\s*(?:ist|lautet|:|=)|\bendergebnis\s*(?:ist|lautet|:|=)"
    r"|\b(?:ist|lautet)\s+(?:also\s+|somit\s+|daher\s+)?die\s+(?:richtige\s+|endg[üu]ltige\s+)?antwort\b(?=\s*[$\\\d(-])",
    # es
    r"\b(?:la\s+)?respuesta(?:\s+final|\s+correcta)?\s*(?:es|ser[áa]|:|=)|\brespuesta\s+final\b",
    # pt
    r"\b(?:a\s+)?resposta(?:\s+final|\s+correta)?\s*(?:é|e|ser[áa]|:|=)(?!\w)|\bresposta\s+final\b",
    # it
    r"\b(?:la\s+)?risposta(?:\s+finale|\s+corretta)?\s*(?:è|e|sar[àa]|:|=)(?!\w)",
    # ru
    r"(?:\b(?:окончательный|итоговый|правильный|финальный)\s+)?\bответ\s*(?::|=|—|–|-|равен\b|будет\b|составляет\b|это\b)"
    r"|\bответ\b(?=\s*[$\\\d(-])",
    # zh
    r"(?:最终|最后的?)?(?:答案|结果|答)\s*(?:应该|应|必须|就)?\s*(?:是|为|：|:|=)",
    # ja
    r"(?:最終的な)?(?:答え|解答|正解|答)\s*(?:は|：|:|=)",
    # ko
    r"(?:최종\s*)?(?:정답|답)\s*(?:은|는|:|=)",
    # choices, in English: "The correct option is (B)", "Option: C"
    r"\b(?:(?:correct|right|best|final)\s+(?:option|choice)\s*(?:is\b|:|=)|(?:option|choice)\s*(?:is\b|:)(?=\s*\(?[A-E]\b)"
    r"|i(?:'d|'ll|\s+would|\s+will)?\s+(?:choose|pick|select|go\s+with)(?=\s*(?:option\s+)?\(?[A-E]\b))",
    # "the final result is" in the languages whose answers are read: a closing marker
    r"\br[ée]sultat\s+final\s*(?:est|:|=)|\bresultado\s+final\s*(?:es|é|e|:|=)|\brisultato\s+finale\s*(?:è|e|:|=)"
    r"|\b(?:окончательный\s+результат|итог)\s*(?::|=|—|–|равен\b)"
    # "Ergebnis:", "Résultat :", "Результат:" heading a line: the result stated
    r"|(?:^|(?<=\n))[\s*#]*(?:ergebnis|r[ée]sultat|resultado|risultato|результат)\s*\**\s*[:：]",
    # "option (B) is correct", "(B) is the correct answer": the letter before its verdict
    r"(?<![\w(])(?:option\s*|choice\s*)?(?=\**\(?[A-E]\)?\**\s+is\s+(?:the\s+)?(?:correct|right|best)\b)",
])  # fmt: skip

# a substring (of the lower-cased text) that every marker above holds: a text with none of
# them is not searched for these markers at all (the search is the costly part)
MARKER_KEYS = ("ponse", "antwort", "endergebnis", "respuesta", "resposta", "risposta", "ответ",
               "sultat", "resultado", "risultato", "итог", "результат",
               "答", "正解", "结果", "답", "option", "choice", "choose", "pick", "select", "go with",
               "ergebnis", "correct", "right", "best")
# markers of languages that write "3,5" for 3.5 and (all but French and Russian) "1.500" for 1500
DECIMAL_COMMA = re.compile(r"r[ée]ponse|antwort|endergebnis|respuesta|resposta|risposta|ответ|"
                           r"r[ée]sultat|resultado|risultato|итог|результат", re.I)
POINT_THOUSANDS = re.compile(r"antwort|endergebnis|respuesta|resposta|risposta|resultado|risultato", re.I)
# which of the markers closes the text (outranks what precedes it, as "Final Answer" does)
FINAL_MARKER = re.compile(
    r"final|итог|r[ée]ponse\s+finale|endg[üu]ltige|endergebnis|respuesta\s+final|resposta\s+final|"
    r"risposta\s+finale|окончательный|итоговый|финальный|最终|最后|最終|최종",
    re.I,
)

# words between a marker and its math ("la réponse est donc 80", "die Antwort ist also 25")
FILLER_WORDS = (r"donc|alors|bien|ainsi|finalement|also|daher|somit|folglich|nun|demnach|"
                r"entonces|pues|finalmente|portanto|ent[ãa]o|assim|quindi|итак|тогда|значит|"
                r"поэтому|следовательно")
CJK_FILLER = r"就|也|应该|应|为|是"

# a verdict on the answer, not an answer ("la réponse est correcte", "答案是正确的")
VERDICT_WORDS = {
    "correcte", "correct", "juste", "fausse", "bonne", "exacte", "richtig", "falsch", "korrekt",
    "stimmt", "correcta", "correcto", "incorrecta", "correta", "correto", "errada", "errado",
    "corretta", "sbagliata", "верный", "верен", "правильный", "правилен", "неверный",
    "неправильный", "вероятно",
}  # fmt: skip
CJK_VERDICTS = ("正确", "对的", "错误", "错的", "不对", "合理", "正しい", "間違", "합리", "맞")

# a supposition: what follows it in its clause is not stated ("si la réponse était 3", "如果")
SUPPOSED = _words(
    r"si", r"supposons", r"admettons", r"imaginons", r"wenn", r"falls", r"angenommen",
    r"nehmen\s+wir\s+an", r"supongamos", r"suponiendo", r"suponemos", r"caso", r"supondo",
    r"suponha", r"suponhamos", r"supponiamo", r"если", r"предположим", r"допустим",
    r"пусть",
    cjk=r"如果|假如|假设|假定|若是|若|要是|もし|仮に|と仮定|만약|가령",
)
# a trial of a value, whose verdict ("too large") is on the value tried, not on the answer
TRIAL = _words(r"try(?:ing)?", r"tried", r"testing", r"test", r"plugging", r"substitut\w*", r"checking",
               r"essayons", r"probieren", r"probamos", r"probando", r"testando", r"попробуем",
               cjk=r"试试|代入|試して|代入すると")
# words after which a clause states again ("si x = 3, alors la réponse est 5")
RESUMES = _words(r"alors", r"donc", r"dann", r"also", r"entonces", r"ent[ãa]o", r"то",
                 r"тогда", cjk=r"那么|则|所以|因此|ならば|なので")
# a negation right after a marker ("die Antwort ist nicht 3", "la respuesta no es 3")
NEGATION_AFTER = re.compile(r"\s*(?:not\b|n't\b|never\b|nicht\b|pas\b|no\b|não\b|не\b|不|並不|ではな|じゃな)", re.I)
# a negation right after the value ("答えは3ではない"; "60 değil" becomes "60 isnot":
# verifiers/_math/languages.py)
NEGATED_VALUE = re.compile(r"\s*(?:ではな|ではありません|じゃな|가\s*아니|이\s*아니|isnot\b)")

# a correction: what came before it is withdrawn (beside conclusion.CORRECTION's English)
CORRECTIONS = _words(
    r"c'est\s+faux", r"erreur", r"je\s+me\s+suis\s+tromp[ée]e?", r"falsch", r"fehler",
    r"ich\s+habe\s+mich\s+verrechnet", r"es\s+incorrecto", r"est[áa]\s+mal", r"me\s+equivoqu[ée]",
    r"est[áa]\s+errad[oa]", r"me\s+enganei", r"errore", r"ошибк[аиу]", r"ошибся", r"неверно",
    r"неправильно",
    cjk=r"错了|算错|有误|不对|搞错|間違(?:い|え)|誤り|計算ミス|잘못",
)
# a softer turn (beside conclusion.TURN's English)
TURNS = _words(r"attendez", r"attends", r"warte", r"moment\s+mal", r"espera", r"espere",
               r"aspetta", r"подожди(?:те)?", cjk=r"等等|等一下|待って|잠깐")

# the head of a check of the answer: "Verification:", "**Check**", "验证：", "Überprüfung:"
CHECK_WORDS = _words(
    r"verification", r"verify(?:ing)?", r"(?:double|sanity|quick|final)[- ]?check(?:ing)?",
    r"check(?:ing)?", r"confirm(?:ation|ing)?", r"proof\s+check", r"v[ée]rification",
    r"v[ée]rifions", r"v[ée]rifier", r"contr[ôo]le", r"[üu]berpr[üu]fung", r"[üu]berpr[üu]fen",
    r"probe", r"kontrolle", r"pr[üu]fung", r"verificaci[óo]n", r"comprobaci[óo]n",
    r"verifiquemos", r"comprobemos", r"verificar", r"comprobar", r"verifica[çc][ãa]o",
    r"gegenprobe", r"verificando", r"conferindo", r"confer[êe]ncia", r"checagem", r"verifica", r"controllo",
    r"проверка", r"проверим", r"проверяем", r"проверки",
    cjk=r"验证|检验|检查|验算|核对|校验|检验一下|検証|確認|検算|確かめ|검증|확인|검산",
)
# words a check's head may start with ("Let's verify:", "Pour vérifier :", "Zur Kontrolle:")
CHECK_LEAD = _words(
    r"let'?s", r"let\s+me", r"let\s+us", r"now", r"to", r"we\s+can", r"i\s+will", r"i'll",
    r"quick(?:ly)?", r"finally", r"a", r"answer", r"pour", r"faisons\s+une", r"une", r"la",
    r"zur", r"die", r"eine", r"para", r"vamos\s+a", r"vamos", r"la", r"a", r"uma", r"per",
    r"для", r"сделаем", r"и",
)

# declining to answer ("cannot determine", "无法确定", "impossible de déterminer")
REFUSALS = _words(
    r"(?:can\s*not|can'?t|could\s*not|couldn'?t|unable\s+to|impossible\s+to|not\s+possible\s+to|"
    r"no\s+way\s+to)\s+(?:be\s+)?(?:uniquely\s+|definitively\s+|exactly\s+)?"
    r"(?:determine[ds]?|answer(?:ed)?|solve[ds]?|calculate[ds]?|compute[ds]?|find|found|know|decide[ds]?)",
    r"(?:not|n't|in)\s*(?:enough|sufficient)\s+(?:information|info|data|details)",
    r"insufficient\s+(?:information|data)", r"impossible\s+to\s+(?:say|tell|know)",
    r"(?:does\s*not|doesn'?t|do\s+not|don'?t)\s+(?:give|provide|contain|include|have|specify)\s+(?:us\s+)?"
    r"(?:enough|sufficient)",
    r"(?:can'?t|cannot)\s+(?:say|tell)\s+(?:for\s+sure|which|what|how)",
    r"(?:is|are|seems\s+to\s+be|appears\s+to\s+be)\s+missing\s+(?:some\s+)?(?:information|data|details?)",
    r"missing\s+(?:some\s+)?(?:necessary\s+|key\s+|crucial\s+)?(?:information|data)",
    r"(?:the\s+)?(?:problem|question)\s+(?:is|seems)\s+(?:ill-posed|incomplete|unanswerable)",
    r"(?:is|are|remains?)\s+(?:undetermined|indeterminate|not\s+determined)",
    r"cannot\s+be\s+(?:uniquely\s+)?determined", r"indeterminable", r"undeterminable",
    r"i\s+don'?t\s+know", r"no\s+(?:definite|definitive|unique)\s+answer",
    r"need\s+more\s+(?:information|info|data|details|context)", r"besoin\s+de\s+plus\s+d'\s*informations?",
    r"(?:brauche|brauchen|benötige|benötigen)\s+mehr\s+(?:informationen|angaben)",
    r"necesit[oa]\s+m[áa]s\s+(?:informaci[óo]n|datos)", r"preciso\s+de\s+mais\s+(?:informa[çc][õo]es|dados)",
    r"нужно\s+больше\s+(?:информации|данных)",
    # fr
    r"impossible\s+de\s+(?:d[ée]terminer|calculer|r[ée]pondre|conclure|trouver|savoir)",
    r"donn[ée]es\s+(?:sont\s+)?insuffisantes",
    r"(?:ne\s+)?(?:peut|peux|pouvons|puis)\s+pas\s+(?:[êe]tre\s+)?(?:d[ée]termin[ée]e?|d[ée]terminer|calculer|r[ée]pondre|trouver|conclure|savoir|dire)",
    r"pas\s+(?:assez|suffisamment)\s+d'\s*informations?", r"informations?\s+insuffisantes?",
    r"(?:il\s+)?manque\s+des\s+(?:informations|donn[ée]es)",
    # de
    r"nicht\s+(?:eindeutig\s+)?(?:zu\s+)?(?:bestimm|berechn|beantwort|ermittel|l[öo]sbar)\w*",
    r"(?:angaben|informationen|daten)\s+reichen\s+nicht", r"reichen\s+(?:die\s+)?(?:angaben|informationen|daten)\s+nicht",
    r"l[äa]sst\s+sich\s+nicht\s+(?:eindeutig\s+)?(?:bestimmen|berechnen|beantworten)",
    r"nicht\s+(?:gen[üu]gend|ausreichend|genug)\s+(?:informationen|angaben|daten)",
    r"(?:fehlen|fehlende)\s+(?:informationen|angaben|daten)", r"unzureichende\s+(?:informationen|angaben)",
    # es
    r"no\s+(?:se\s+)?(?:puede|puedo|podemos|es\s+posible)\s+(?:ser\s+)?(?:determinar|determinad[oa]|calcular|responder|saber)",
    r"no\s+hay\s+(?:suficiente|bastante)\s+informaci[óo]n", r"informaci[óo]n\s+insuficiente",
    r"imposible\s+(?:de\s+)?(?:determinar|calcular|saber|responder)",
    r"falta(?:n)?\s+(?:informaci[óo]n|datos)",
    # pt
    r"n[ãa]o\s+(?:[ée]\s+poss[íi]vel|se\s+pode|posso|podemos|consigo|conseguimos)\s+(?:ser\s+)?(?:determinar|determinad[oa]|calcular|responder|saber)",
    r"n[ãa]o\s+h[áa]\s+informa[çc](?:[ãa]o|[õo]es)\s+suficientes?",
    r"informa[çc](?:[ãa]o|[õo]es)\s+insuficientes?", r"faltam\s+(?:informa[çc][õo]es|dados)",
    r"imposs[íi]vel\s+(?:de\s+)?(?:determinar|calcular|saber|responder)",
    # it
    r"impossibile\s+(?:determinare|calcolare|rispondere)", r"informazioni\s+insufficienti",
    # ru
    r"(?:невозможно|нельзя|не\s+могу|не\s+можем|не\s+удаётся|не\s+удается)\s+(?:однозначно\s+)?"
    r"(?:определить|вычислить|найти|ответить|установить)",
    r"(?:определить|вычислить|найти|ответить|установить)\b[^.!?\n]{0,40}?(?:невозможно|нельзя)",
    r"недостаточно\s+(?:информации|данных|сведений)", r"не\s+хватает\s+(?:информации|данных|сведений)",
    r"без\s+дополнительных\s+(?:данных|сведений|условий)",
    cjk=r"无法(?:确定|计算|求出|求得|得出|得知|算出|回答|判断|确认|知道)|不能(?:确定|求出|计算|回答)|信息不足|条件不足|"
        r"(?:无法|不能)(?:作答|解答|求解|判定)|不确定|无法知道|无从知道|(?:分|わ)かりません|答えられ(?:ません|ない)|(?:判断|決定|特定|確定)できない|需要更多(?:的)?(?:信息|条件)|"
        r"もっと情報が必要|"
        r"缺少(?:必要的)?(?:信息|条件|数据)|无从(?:得知|确定)|"
        r"(?:判断|決定|特定|確定|計算|算出)(?:することは)?できません|求められません|"
        r"(?:求める|決める|答える)ことができません|情報が(?:不足|足りない|足りません)|"
        r"(?:알\s*수|결정할\s*수|구할\s*수)\s*없",
)

# a second value offered after the conclusion: words after it ("24 est aussi valable", "24也是")
HEDGE_AFTER = (
    r"\s*(?:(?:est|serait|pourrait\s+[êe]tre)\s+(?:aussi|[ée]galement)\s+(?:valable|possible|correcte?|juste|une)"
    r"|(?:ist|w[äa]re|k[öo]nnte)\s+(?:auch|ebenfalls)\s+(?:m[öo]glich|richtig|korrekt|g[üu]ltig|eine|sein)"
    r"|(?:tambi[ée]n\s+es|es\s+tambi[ée]n|tambi[ée]n\s+podr[íi]a\s+ser|tambi[ée]n\s+ser[íi]a)\s+(?:v[áa]lid[oa]|posible|correct[oa]|una)"
    r"|(?:tamb[ée]m\s+[ée]|[ée]\s+tamb[ée]m|tamb[ée]m\s+poderia\s+ser)\s+(?:v[áa]lid[oa]|poss[íi]vel|corret[oa]|uma)"
    r"|(?:тоже|также)\s+(?:подходит|возмож\w*|вер\w*|правильн\w*|явля\w*|может)"
    r"|也(?:是|可以|成立|满足|符合|正确|行|可能)|も(?:正解|答え|考えられ|あり得|可能|正し)"
    # "10 est aussi ...", "10 ist auch ...", "10 тоже ...", "10 works too": any word after
    r"|(?:est|serait|ist|w[äa]re|es|ser[íi]a|[ée]|seria|è|sarebbe)\s+(?:aussi|[ée]galement|auch|ebenfalls|"
    r"tambi[ée]n|tamb[ée]m|anche)\b|(?:тоже|также)\b"
    r"|\s(?:works|fits|is\s+(?:fine|ok(?:ay)?|valid|correct|right|possible))\s+(?:too|as\s+well)\b"
    r"|\s+(?:might|may|could)\b"  # "30 might be what the question intends"
    # another language's "also" within two words after it: "30 ginge aber auch", "30 也说得通"
    r"|\s+(?:[^\W\d_]+\s+){0,2}(?:auch|aussi|[ée]galement|tambi[ée]n|tamb[ée]m|anche|тоже|также)\b|\s*[也も])"
)
# ... or words before it ("ou peut-être 24", "或者 24", "или 24")
HEDGE_BEFORE = (
    r"(?:\b(?:ou\s+bien|ou\s+peut-[êe]tre|peut-[êe]tre|oder\s+auch|vielleicht|o\s+tambi[ée]n|quiz[áa]s?|"
    r"voire|eventuell(?:\s+auch)?|m[öo]glicherweise|vielleicht\s+auch|aunque|obwohl|bien\s+que|quoique|"
    r"embora|хотя|"
    r"(?:w[äa]re|ist|sind|k[öo]nnte|wobei|aber|doch)\s+(?:auch|ebenfalls)|mais\s+aussi|pero\s+tambi[ée]n|mas\s+tamb[ée]m|(?:serait|est|pourrait\s+[êe]tre)\s+(?:aussi|[ée]galement)|"
    r"(?:ser[íi]a|es|podr[íi]a\s+ser)\s+tambi[ée]n|(?:seria|[ée]|poderia\s+ser)\s+tamb[ée]m|"
    r"tal\s+vez|ou\s+tamb[ée]m|talvez|или\s+же|может\s+быть|возможно)\b|或者|也可能是|也可以是|也有可能是|也许是|也许|或是|可能是|虽然|尽管|"
    r"または|あるいは|もしくは|もしかすると|もしかしたら)[\s,:]*"
)

# "or" in the languages read, for a second value offered right after the answer ("12 (oder 15)")
OR_WORDS = r"\b(?:oder|bzw\.?|beziehungsweise|ou|o|или|либо)(?!\w)|或者|或|または|あるいは|もしくは"
# "or" and "and" between two values, making them a list ("8 или 9", "8 ou 9", "8 或 9")
CONNECTOR_WORDS = r"\b(?:или|либо|ou|oder|o|и|et|und|y|e)\b|或者|或|または|あるいは|もしくは|和|及|、|，"

# a sentence declining to answer in words no refusal above lists: a negation and a word of
# knowing or answering in one sentence after all the math ("we can't give a definitive answer",
# "ist die Frage nicht zu beantworten", "no hay forma de saberlo", "la question reste sans réponse")
NEGATIONS = (r"\b(?:not|no|never|without|cannot|unable|impossible|unknown|ne|pas|sans|faute|nicht|ohne|"
             r"kein\w*|sin|sem|n[ãa]o|не|без|нельзя|невозможно)\b|n't|不|无|没|未|ない|ません|不明|できず")
KNOWING = (r"\b(?:determin\w*|answer\w*|know\w*|say|tell|sure|certain\w*|definitive\w*|solv\w*|conclu\w*|"
           r"d[ée]termin\w*|r[ée]pon\w*|savoir|sait|bestimm\w*|beantwort\w*|wissen|wei[ßs]|"
           r"respond\w*|respuesta|sab\w*|resposta|responder|определ\w*|ответ\w*|знать|сказать|antwort|"
           r"l[öo]sung\w*|solution|soluci[óo]n|solu[çc][ãa]o|решени\w*|pin\w*\s+down|establish\w*|"
           r"figure\w*\s+out|work\w*\s+out|angeb\w*|angegeben|sagen|nennen)\b|"
           r"确定|知道|回答|作答|解答|答案|判断|分から|わから|答え|特定")
# ... with a word of being able ("can't", "impossible", "no way", "möglich", "无法", "できない"),
# or of the answer itself ("sans réponse", "keine Antwort"): "we don't need to know x" declines nothing
CAPABLE = (r"\b(?:can|cannot|could|able|unable|possible|impossible|way|kann|k[öo]nnen|l[äa]sst|m[öo]glich|"
           r"peut|peux|pouvons|moyen|sans|puede|puedo|podemos|posible|forma|manera|pode|posso|"
           r"conseguimos|poss[íi]vel|d[áa]|sem|sin|можно|нельзя|невозможно|удаётся|удается|"
           r"answer|r[ée]ponse|antwort|respuesta|resposta|ответ)\b|能|法|可能|できな|できません|られません|出せません")
# a parenthesis that supposes ("(if ...", "（若 ...", "(falls ...", "（1袋5個なら"): a value after it is offered
SUPPOSED_ASIDE = rf"[(（][^()（）]{{0,40}}?(?:{SUPPOSED}|\bif\b|\bwhen\b|なら|場合|则)"
# a unit between a value and the connector after it ("24 m², or 28 m²", "24 м² (либо 28 м²)")
UNIT_BETWEEN = r"(?:\s*[^\W\d_]{1,12}(?:\^\{?\d\}?)?(?:/[^\W\d_]{1,6})?)?[\s(（]*"
# between two values, the words that make the second one offered beside the first (any language)
HEDGE_BETWEEN = (rf"{HEDGE_BEFORE}|\b(?:o\s+quiz[áa]s?|ou\s+talvez|или\s+может\s+быть)\b|则是|则为"
                 # "80 km/h, mit Pause 60 km/h": a condition named right before the second value
                 r"|\b(?:mit|ohne|with|without|avec|sans|en\s+comptant|con|sin|com|sem|с|без)\s+(?:[^\W\d_]+\s+){0,3}$")
