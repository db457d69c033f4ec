/**
 * The signature of internal requests (src/cluster/signature.ts): valid only with the same secret,
 * method, path and body, within 30 s; malformed or oversized headers are refused without throwing.
 */
import { describe, expect, it } from "vitest"
import { headProblem, sign, signatureProblem, SIGNATURE_WINDOW_MS } from "../../src/cluster/signature.js"

const SECRET = "0123456789abcdef0123456789abcdef"
const body = JSON.stringify({ tool_name: "fx__echo", args: { text: "hi" } })

describe("cluster request signature", () => {
  it("accepts the signed request and refuses any change of it", () => {
    const now = 1_700_000_000_000
    const header = sign(SECRET, "POST", "/_cluster/v1/call", body, now)
    expect(signatureProblem(SECRET, "post", "/_cluster/v1/call", body, header, now + 1000)).toBeUndefined()
    expect(signatureProblem("another secret of the same size!", "POST", "/_cluster/v1/call", body, header, now)).toBe("wrong signature")
    expect(signatureProblem(SECRET, "GET", "/_cluster/v1/call", body, header, now)).toBe("wrong signature")
    expect(signatureProblem(SECRET, "POST", "/_cluster/v1/other", body, header, now)).toBe("wrong signature")
    expect(signatureProblem(SECRET, "POST", "/_cluster/v1/call", body.replace("hi", "ho"), header, now)).toBe("wrong signature")
    // A replay after the window, or a clock far ahead, is refused.
    expect(signatureProblem(SECRET, "POST", "/_cluster/v1/call", body, header, now + SIGNATURE_WINDOW_MS + 1)).toBe("signature outside the time window")
    expect(signatureProblem(SECRET, "POST", "/_cluster/v1/call", body, header, now - SIGNATURE_WINDOW_MS - 1)).toBe("signature outside the time window")
    // The timestamp is signed: moving it breaks the signature.
    const moved = header.replace(`t=${now}`, `t=${now + 1}`)
    expect(signatureProblem(SECRET, "POST", "/_cluster/v1/call", body, moved, now)).toBe("wrong signature")
  })

  it("refuses missing, malformed and oversized headers", () => {
    expect(signatureProblem(SECRET, "POST", "/p", body, undefined)).toBe("no signature")
    expect(signatureProblem(SECRET, "POST", "/p", body, "x".repeat(10_000))).toBe("no signature")
    expect(signatureProblem(SECRET, "POST", "/p", body, "t=1,v1=zz")).toBe("malformed signature")
    expect(signatureProblem(SECRET, "POST", "/p", body, `t=${Date.now()},h1=${"0".repeat(64)},v1=${"0".repeat(63)}`)).toBe("malformed signature")
    // Without the head's signature (the former form): refused as malformed, before any body is read.
    expect(signatureProblem(SECRET, "POST", "/p", body, `t=${Date.now()},v1=${"0".repeat(64)}`)).toBe("malformed signature")
    expect(signatureProblem(SECRET, "POST", "/p", body, `t=${Date.now()},h1=${"0".repeat(64)},v1=${"0".repeat(64)}`)).toBe("wrong signature")
  })

  it("the head's signature is checked before the body, with the body's length: without the secret, no body is read", () => {
    const now = 1_700_000_000_000
    const header = sign(SECRET, "POST", "/_cluster/v1/forward", body, now)
    const length = Buffer.byteLength(body)
    expect(headProblem(SECRET, "POST", "/_cluster/v1/forward", length, header, now)).toBeUndefined()
    // Another length (a body swapped for a bigger one), another path, another secret: refused before reading.
    expect(headProblem(SECRET, "POST", "/_cluster/v1/forward", length + 1_000_000, header, now)).toBe("wrong signature")
    expect(headProblem(SECRET, "POST", "/_cluster/v1/other", length, header, now)).toBe("wrong signature")
    expect(headProblem("another secret of the same size!", "POST", "/_cluster/v1/forward", length, header, now)).toBe("wrong signature")
    // Anyone's made-up signature with a fresh time (the body was read before, to find it wrong).
    expect(headProblem(SECRET, "POST", "/_cluster/v1/forward", 1_000_000, `t=${now},h1=${"ab".repeat(32)},v1=${"cd".repeat(32)}`, now)).toBe("wrong signature")
  })
})
