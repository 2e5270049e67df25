"""Byte vectors for the messaging tests.

SEED_*: the link handshake frames printed in seed 003; sig1 and sig2 are real signatures, so they check
our signing payload and signature format (only verification is reproducible: skycoin signs with a random
nonce).

SKYWIRE_*: produced by running Skywire's own Go code (github.com/skycoin/skywire at 4b910dc91, the
version the seed describes: internal/noise with flynn/noise, pkg/cipher, pkg/messaging-discovery/client)
on keys made with skycoin's GenerateDeterministicKeyPair from the seeds "burrow-a-static",
"burrow-b-static", "burrow-a-ephemeral", "burrow-b-ephemeral" and "burrow-server". The ephemeral keys
were fixed by a DH wrapper returning them from GenerateKeypair. Entries were signed with Entry.Sign and
printed with json.Marshal.
"""

SEED_INITIATOR = "036b630436972743d4b3f5bb39cd451da29d222b5d30893684a40f34a66c692157"
SEED_RESPONDER = "02e18998f0174631710e47052927e13bddc712ca0c11289e0150fbf57570e31151"
SEED_NONCE = "853ea8454d11bd3b59cb31f8572a3779"
SEED_SIG1 = ("df8a978f0ea681e218cfd8127692dbe4190441567181b9057ab15da34b08ff61"
             "0d9060e5195419e1744bb57d50373c1dd444b5c2753a80dba32b292fa306e9df01")
SEED_SIG2 = ("fc17928d5a3f7691434282fb3108d1603889f996e8e45adc2e35362e08009b86"
             "11abb9f45e511b9931f0f04b37ff1057fd69554befe534ad28c77ff0c44121ab00")

SKYWIRE_A_SECRET = "c1b80bddbc00c2e3c63ce4cb25912c02c0cf2d0b28c9144e71cffd666880c7b8"
SKYWIRE_A_PUBLIC = "032f5bf91a355c0b565dd4d44b4c428e48b89876effb96f56861005dbee3fdb6ec"
SKYWIRE_B_SECRET = "e00b64e02b24303961c5142cffe12699c7bca631d15c393ef2fe820672f7226e"
SKYWIRE_B_PUBLIC = "0216c8fc22b3cf9eabb5433aaa8b84a7287188f34a421d874a1eba3f49e2ffcf87"
SKYWIRE_A_EPHEMERAL = "2639a1ba3a94b007bc98ef3e9f956a7eddb4da132dc771fb9235f4c254fd4e6b"
SKYWIRE_B_EPHEMERAL = "576d430eb439572943905c11f1c6c37703f7aedcd888aa6e446fbef9c9589e36"
SKYWIRE_DH_A_B = "04293193263a726c40feff36f144dee71bacdfebeb0eac76dc7a763043a4312000"  # DH(a secret, b public)
SKYWIRE_MESSAGE1 = "032288b89f25f14cfb6ed404ee84030dbc8ce2d4e634ac34d9da4b6db1aafc27a438b519108602510df8cd0d09abff7427"
SKYWIRE_MESSAGE2 = "0297d3bdcc25d59332c62c168a20b24bbf304942808b5829dd0fcebcde89b1e53d60178f52a0b1563545db4fb8c4dbc4dd"
# a encrypts b"a->b 1" .. b"a->b 12" after the handshake (the 10th onwards after a rekey)
SKYWIRE_A_TO_B = [
    "b783b7cec08fe9fe486a38567d0bc7b3cde0bcbc85cf",
    "da196fae4f0d3d9f32ceaeac2d196856151664c4eefe",
    "6142c03183c391534eb3e52bdbd84eb884d0e12776e9",
    "8dce5cfaa1fbff0c31bdc2f9117b68b992669376c7f9",
    "53f8fb146e516cac1a3e98f29682ab605ac6bc487cfe",
    "729519d8b99d1bbed72a60b456aa31413c532cf0442e",
    "216158f9ae0da0458ff4e14e97fcbd73b8c33d6d6183",
    "a7023072efcda2081b4deb45726ce174a84850a366dd",
    "bb3c3c3a35796a9b622bb1f443f4b27fe27fbe0d77da",
    "ae4e19a30927be36e06bfc3e1c9c7c38f15307c580ef26",
    "a49932084b6bf6d9733f4839d4eee4cd15be486cde1365",
    "33fe2c43a3864684f2e833b5cb5d1e3e7c0b9369e2431f",
]
SKYWIRE_B_TO_A_1 = "d3b0b55381a7f1183e1f55454b419b74e55566b2e2c4"  # b encrypts b"b->a 1"
# cipher.SignPayload(b"burrow", a secret)
SKYWIRE_SIG_A_BURROW = ("ea34ca3118ce2563c846846f4e9b06ad8ca13f74d3109c607915a2675509a213"
                        "166ec2cb8d33573741a341fa3380dcb64d93f271a6b7befeb9d1fc3e4ec9bf9401")
# a handshake frame 1 as Skywire writes it: zero-filled sig1/sig2 are present (Go's omitempty keeps arrays)
SKYWIRE_FRAME1 = (
    '{"version":"0.1","initiator":"032f5bf91a355c0b565dd4d44b4c428e48b89876effb96f56861005dbee3fdb6ec",'
    '"responder":"02f8f08a64bd343d614ecc459210ae2438facffc088924a94f8ca07d92cb3587d7",'
    '"nonce":"ec50378dc217eeb01713a2a6ac64a977","sig1":"' + "0" * 130 + '","sig2":"' + "0" * 130 + '"}')
SKYWIRE_SERVER_SECRET = "663bf17692cab8da4fcae1d1042eaf5d989ddfff15dc3435c9cbea74b6a0a10b"
SKYWIRE_SERVER_PUBLIC = "02f8f08a64bd343d614ecc459210ae2438facffc088924a94f8ca07d92cb3587d7"
SKYWIRE_CLIENT_ENTRY = (
    '{"version":"0.0.1","sequence":0,"timestamp":1700000000123456789,"static":"032f5bf91a355c0b565dd4d44b'
    '4c428e48b89876effb96f56861005dbee3fdb6ec","client":{"delegated_servers":["02f8f08a64bd343d614ecc4592'
    '10ae2438facffc088924a94f8ca07d92cb3587d7"]},"signature":"e0d70fa23030bd89590aadeec863c9936c3e1c116c1'
    '15250d51543dcec9adf33119c1afb63d5c5b044024089587d195d6f0e885e9fa17207ea0aa191f11f285e01"}')
SKYWIRE_SERVER_ENTRY = (
    '{"version":"0.0.1","sequence":7,"timestamp":1700000000987654321,"static":"02f8f08a64bd343d614ecc4592'
    '10ae2438facffc088924a94f8ca07d92cb3587d7","server":{"address":"127.0.0.1:8081","port":"","available_'
    'connections":2000},"signature":"d00790f93ad378d3341004a115f460b6176d4fd8a7ef096813bda9600724a47a407a'
    'feea5ac95d5bcb5d079627bc6d414837b17723c82789e1b68a79db21afd901"}')
SKYWIRE_CLIENT_ENTRY_NIL_SERVERS = (
    '{"version":"0.0.1","sequence":3,"timestamp":1700000001000000000,"static":"032f5bf91a355c0b565dd4d44b'
    '4c428e48b89876effb96f56861005dbee3fdb6ec","client":{"delegated_servers":null},"signature":"5ad83e95e'
    '1f41d79f5e95a2f4677c715efeec57da724aee0571c185418e2b7e745e30d6539e0bdde7b8f8ad35f4a4ebd4be74d3c08b9f'
    '743eb20ca3056010b0e01"}')
