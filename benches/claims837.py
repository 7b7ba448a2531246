#!/usr/bin/env python3
"""An 837P (005010X222A1) from ACME of SETS sets of CLAIMS claims, each claim under its own
subscriber, on standard output (the shape `benches/parse.rs`'s `claims_file` builds):

    python3 benches/claims837.py 10 2000 > /tmp/c20k.x12
    /usr/bin/time -f "%e s %M KB" target/release/x12gate process /tmp/c20k.x12

ACME must be a partner (or `unknown_partners = "accept"`). ISA13 is 101; pass a third
argument to number the interchange otherwise (a batch of the same claims sent again).
"""
import sys

sets, claims = int(sys.argv[1]), int(sys.argv[2])
number = int(sys.argv[3]) if len(sys.argv) > 3 else 101
out = [
    "ISA*00*          *00*          *ZZ*ACME           *ZZ*X12GATE        *240305*1130*^*00501*%09d*0*P*:~" % number,
    "GS*HC*ACME*X12GATE*20240305*1130*%d*X*005010X222A1~" % number,
]
n = 0
for s in range(1, sets + 1):
    body = [
        "BHT*0019*00*BATCH-%d-%d*20240305*1130*CH~" % (number, s),
        "NM1*41*2*ACME CLINIC*****46*ACME01~",
        "PER*IC*BILLING OFFICE*TE*5555550142~",
        "NM1*40*2*EXAMPLE HEALTH PLAN*****46*841234567~",
        "HL*1**20*1~",
        "PRV*BI*PXC*207Q00000X~",
        "NM1*85*2*ACME CLINIC*****XX*1234567893~",
        "N3*1200 MAPLE AVENUE~",
        "N4*SPRINGFIELD*IL*627040000~",
        "REF*EI*371234567~",
    ]
    for c in range(claims):
        n += 1
        body += [
            "HL*%d*1*22*0~" % (c + 2),
            "SBR*P*18*GRP-55120******CI~",
            "NM1*IL*1*DOE*JANE****MI*S%07d~" % n,
            "NM1*PR*2*EXAMPLE HEALTH PLAN*****PI*841234567~",
            "CLM*C-%07d*%d***11:B:1*Y*A*Y*Y~" % (n, 100 + n % 50),
            "HI*ABK:J029~",
            "LX*1~",
            "SV1*HC:99212*95*UN*1***1~",
            "DTP*472*D8*20240229~",
        ]
    out.append("ST*837*%04d*005010X222A1~" % s)
    out += body
    out.append("SE*%d*%04d~" % (len(body) + 2, s))
out.append("GE*%d*%d~" % (sets, number))
out.append("IEA*1*%09d~" % number)
sys.stdout.write("\n".join(out) + "\n")
