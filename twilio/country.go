package twilio

import (
	"strings"

	"github.com/keybrake/keybrake"
)

// callingCodes maps E.164 country calling codes to ISO 3166-1 alpha-2
// countries. Where several countries share a code, the longer prefixes
// below tell them apart; a number is matched on its longest prefix.
var callingCodes = parseCodes(`
1:US 20:EG 211:SS 212:MA 213:DZ 216:TN 218:LY 220:GM 221:SN 222:MR 223:ML 224:GN 225:CI 226:BF
227:NE 228:TG 229:BJ 230:MU 231:LR 232:SL 233:GH 234:NG 235:TD 236:CF 237:CM 238:CV 239:ST
240:GQ 241:GA 242:CG 243:CD 244:AO 245:GW 246:IO 248:SC 249:SD 250:RW 251:ET 252:SO 253:DJ
254:KE 255:TZ 256:UG 257:BI 258:MZ 260:ZM 261:MG 262:RE 263:ZW 264:NA 265:MW 266:LS 267:BW
268:SZ 269:KM 27:ZA 290:SH 291:ER 297:AW 298:FO 299:GL 30:GR 31:NL 32:BE 33:FR 34:ES 350:GI
351:PT 352:LU 353:IE 354:IS 355:AL 356:MT 357:CY 358:FI 359:BG 36:HU 370:LT 371:LV 372:EE
373:MD 374:AM 375:BY 376:AD 377:MC 378:SM 380:UA 381:RS 382:ME 383:XK 385:HR 386:SI 387:BA
389:MK 39:IT 3906698:VA 40:RO 41:CH 420:CZ 421:SK 423:LI 43:AT 44:GB 441481:GG 441534:JE
441624:IM 45:DK 46:SE 47:NO 48:PL 49:DE 500:FK 501:BZ 502:GT 503:SV 504:HN 505:NI 506:CR
507:PA 508:PM 509:HT 51:PE 52:MX 53:CU 54:AR 55:BR 56:CL 57:CO 58:VE 590:GP 591:BO 592:GY
593:EC 594:GF 595:PY 596:MQ 597:SR 598:UY 599:CW 60:MY 61:AU 62:ID 63:PH 64:NZ 65:SG 66:TH
670:TL 672:NF 673:BN 674:NR 675:PG 676:TO 677:SB 678:VU 679:FJ 680:PW 681:WF 682:CK 683:NU
685:WS 686:KI 687:NC 688:TV 689:PF 690:TK 691:FM 692:MH 7:RU 76:KZ 77:KZ 81:JP 82:KR 84:VN
850:KP 852:HK 853:MO 855:KH 856:LA 86:CN 880:BD 886:TW 90:TR 91:IN 92:PK 93:AF 94:LK 95:MM
960:MV 961:LB 962:JO 963:SY 964:IQ 965:KW 966:SA 967:YE 968:OM 970:PS 971:AE 972:IL 973:BH
974:QA 975:BT 976:MN 977:NP 98:IR 992:TJ 993:TM 994:AZ 995:GE 996:KG 998:UZ
` +
	// Jersey, Guernsey and the Isle of Man share +44 with Britain, and
	// their mobiles too: Twilio prices them as their own countries, not
	// at Britain's rates (libphonenumber's ranges).
	`
447781:GG 447839:GG 4479111:GG 4479117:GG
447509:JE 447829:JE 447937:JE 4477003:JE 4477007:JE 4477008:JE 4477977:JE 4477978:JE 4477979:JE
4474576:IM 447524:IM 447924:IM 4476240:IM 4476241:IM 4476242:IM 4476243:IM 4476244:IM 4476246:IM
4476248:IM 4476249:IM
` +
	// Other territories inside another country's code, for the same
	// reason: Mayotte (+262), Bonaire (+599), Åland (+358), Svalbard
	// (+47), Western Sahara (+212).
	`
262269:YT 262639:YT 5997:BQ 35818:AX 4779:SJ 2125288:EH 2125289:EH
` +
	// Christmas Island and the Cocos (Keeling) Islands share +61 with
	// Australia: their fixed lines are +61 8 9164 and +61 8 9162, which
	// Australia's own plan excludes (libphonenumber's ranges); their
	// mobiles are Australian.
	`
6189164:CX 6189162:CC
` +
	// The North American Numbering Plan: +1 is the United States unless
	// the area code belongs to Canada or another country. The Caribbean
	// ones cost many times a US message, so they must not fall to US.
	`
1204:CA 1226:CA 1236:CA 1249:CA 1250:CA 1257:CA 1263:CA 1289:CA 1306:CA 1343:CA 1354:CA 1365:CA
1367:CA 1368:CA 1382:CA 1387:CA 1403:CA 1416:CA 1418:CA 1428:CA 1431:CA 1437:CA 1438:CA 1450:CA
1460:CA 1468:CA 1474:CA 1506:CA 1514:CA 1519:CA 1548:CA 1579:CA 1581:CA 1584:CA 1587:CA 1600:CA
1604:CA 1613:CA 1639:CA 1647:CA 1672:CA 1683:CA 1705:CA 1709:CA 1742:CA 1753:CA 1778:CA 1780:CA
1782:CA 1807:CA 1819:CA 1825:CA 1867:CA 1873:CA 1879:CA 1902:CA 1905:CA 1942:CA
1242:BS 1246:BB 1264:AI 1268:AG 1284:VG 1340:VI 1345:KY 1441:BM 1473:GD 1649:TC 1658:JM
1664:MS 1670:MP 1671:GU 1684:AS 1721:SX 1758:LC 1767:DM 1784:VC 1787:PR 1809:DO 1829:DO
1849:DO 1868:TT 1869:KN 1876:JM 1939:PR
`)

// sharedCodes are the prefixes whose numbers may belong to any of several
// countries that the numbering plan does not tell apart: Guadeloupe, Saint
// Barthélemy and Saint Martin share +590 and draw their numbers, mobiles
// included, from the same ARCEP ranges ("we can't reliably distinguish
// between them", libphonenumber). Such a number is in all of them for
// allowed_countries, and priced at the dearest of their rates.
var sharedCodes = map[string][]string{"590": {"GP", "BL", "MF"}}

// unplaced are prefixes inside another country's code that belong to a
// territory without an ISO 3166-1 code, which Twilio may price apart from
// the code's country: Abkhazia's fixed (+7 840) and mobile (+7 940) codes
// in Russia's plan, and Northern Cyprus's +90 392 in Turkey's. keybrake
// can neither rate nor scope them, so it refuses them.
var unplaced = map[string]string{"7840": "Abkhazia", "7940": "Abkhazia", "90392": "Northern Cyprus"}

func parseCodes(s string) map[string]string {
	m := map[string]string{}
	for _, f := range strings.Fields(s) {
		code, iso, _ := strings.Cut(f, ":")
		if _, dup := m[code]; dup {
			panic("twilio: calling code listed twice: " + code)
		}
		m[code] = iso
	}
	return m
}

// Country returns the ISO 3166-1 alpha-2 country of an E.164 number
// (+14155550100 is US, +18765550100 is JM, +447700900123 is GB); for a
// number in a shared code (see Countries), the first of its countries.
//
// Returns EINVALID naming param for a number that is not E.164 (a plus,
// then 8 to 15 digits, the first not 0), and EFORBIDDEN for a number
// whose country calling code keybrake does not know, or that belongs to a
// territory keybrake cannot place (Abkhazia, Northern Cyprus).
func Country(param, number string) (string, error) {
	c, err := Countries(param, number)
	if err != nil {
		return "", err
	}
	return c[0], nil
}

// Countries returns every country an E.164 number may belong to: one,
// except in a code whose countries the numbering plan does not tell
// apart (+590: GP, BL, MF). Errors as Country.
func Countries(param, number string) ([]string, error) {
	digits, ok := strings.CutPrefix(number, "+")
	if !ok || len(digits) < 8 || len(digits) > 15 || digits[0] == '0' {
		return nil, keybrake.ErrorParam(param, "The '%s' number %s is not a valid phone number: keybrake needs E.164 (+ and the country code).", param, printable(number))
	}
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return nil, keybrake.ErrorParam(param, "The '%s' number %s is not a valid phone number: keybrake needs E.164 (+ and the country code).", param, printable(number))
		}
	}
	for n := 7; n >= 1; n-- {
		if where, ok := unplaced[digits[:n]]; ok {
			return nil, keybrake.Errorf(keybrake.EFORBIDDEN, "%s is a number of %s, which Twilio may price apart from the country of its calling code and which has no ISO country keybrake can rate or scope.", printable(number), where)
		}
		if iso, ok := callingCodes[digits[:n]]; ok {
			if all, ok := sharedCodes[digits[:n]]; ok {
				return all, nil
			}
			return []string{iso}, nil
		}
	}
	return nil, keybrake.Errorf(keybrake.EFORBIDDEN, "keybrake does not know the country of %s.", printable(number))
}

// CallingCode returns the country calling code of an E.164 number, as
// written after its plus (1 for +1 415…, 44 for +44 7700…, 7 for a
// Kazakh +7 7…), and false when the number is not E.164 or its code is
// not one keybrake knows. ITU codes are prefix-free, so at most one of the
// number's first one, two or three digits is one.
func CallingCode(number string) (string, bool) {
	digits, ok := strings.CutPrefix(number, "+")
	if !ok || len(digits) < 4 {
		return "", false
	}
	if digits[0] == '1' || digits[0] == '7' {
		// The two shared zones: NANP's and Russia's and Kazakhstan's.
		return digits[:1], true
	}
	for k := 2; k <= 3; k++ {
		if _, ok := callingCodes[digits[:k]]; ok {
			return digits[:k], true
		}
	}
	return "", false
}
