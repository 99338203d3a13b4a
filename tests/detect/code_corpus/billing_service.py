"""Billing service: invoices, payment intents and the reconciliation job."""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal

import httpx
from sqlalchemy import Column, DateTime, ForeignKey, Integer, Numeric, String, select
from sqlalchemy.ext.asyncio import AsyncSession

log = logging.getLogger("billing.reconciliation")

B64_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
INVOICE_NUMBER_PATTERN = re.compile(r"^INV-(?P<year>\d{4})-(?P<sequence>\d{6})$")
STRIPE_API_BASE_URL = "https://api.stripe.com/v1"
DEFAULT_PAYMENT_TERMS = timedelta(days=30)
WEBHOOK_TOLERANCE_SECONDS = 300
CURRENCY_EXPONENTS: Mapping[str, int] = {"EUR": 2, "USD": 2, "JPY": 0, "KWD": 3}


@dataclass(frozen=True, slots=True)
class MoneyAmount:
    """An amount in minor units of a currency (cents, yen, fils)."""

    minor_units: int
    currency: str

    @classmethod
    def from_decimal(cls, value: Decimal, currency: str) -> MoneyAmount:
        exponent = CURRENCY_EXPONENTS[currency]
        quantized = value.quantize(Decimal(1).scaleb(-exponent), rounding=ROUND_HALF_EVEN)
        return cls(int(quantized.scaleb(exponent)), currency)

    def to_display_string(self) -> str:
        exponent = CURRENCY_EXPONENTS[self.currency]
        return f"{Decimal(self.minor_units).scaleb(-exponent):,.{exponent}f} {self.currency}"


@dataclass
class ReconciliationReportForAccountingPeriod:
    period_start: datetime
    period_end: datetime
    matched_invoice_identifiers: list[str] = field(default_factory=list)
    unmatched_payment_intent_identifiers: list[str] = field(default_factory=list)
    total_settled_amount_by_currency: dict[str, int] = field(default_factory=dict)

    def mark_matched(self, invoice_id: str, amount: MoneyAmount) -> None:
        self.matched_invoice_identifiers.append(invoice_id)
        previous = self.total_settled_amount_by_currency.get(amount.currency, 0)
        self.total_settled_amount_by_currency[amount.currency] = previous + amount.minor_units


class InvoiceRecord:
    __tablename__ = "billing_invoices"

    id = Column(Integer, primary_key=True)
    number = Column(String(32), unique=True, nullable=False)
    customer_id = Column(Integer, ForeignKey("crm_customers.id"), nullable=False)
    amount_minor_units = Column(Numeric(18, 0), nullable=False)
    currency = Column(String(3), nullable=False)
    issued_at = Column(DateTime(timezone=True), nullable=False)
    payment_intent_reference = Column(String(64), nullable=True)


def verify_webhook_signature(payload: bytes, header: str, signing_secret: str) -> bool:
    """Check the `t=...,v1=...` signature header of a payment-provider webhook."""
    parts = dict(item.split("=", 1) for item in header.split(",") if "=" in item)
    timestamp = int(parts.get("t", "0"))
    now = int(datetime.now(tz=UTC).timestamp())
    if abs(now - timestamp) > WEBHOOK_TOLERANCE_SECONDS:
        return False
    signed_payload = f"{timestamp}.".encode() + payload
    expected = hmac.new(signing_secret.encode(), signed_payload, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, parts.get("v1", ""))


def encode_idempotency_key(customer_id: int, invoice_number: str) -> str:
    digest = hashlib.sha256(f"{customer_id}:{invoice_number}".encode()).digest()
    return base64.urlsafe_b64encode(digest[:18]).decode().rstrip("=")


async def fetch_settled_payment_intents(
    client: httpx.AsyncClient, *, created_after: datetime, page_size: int = 100
) -> list[dict[str, object]]:
    results: list[dict[str, object]] = []
    starting_after: str | None = None
    while True:
        params: dict[str, str | int] = {
            "limit": page_size,
            "created[gte]": int(created_after.timestamp()),
        }
        if starting_after:
            params["starting_after"] = starting_after
        response = await client.get(f"{STRIPE_API_BASE_URL}/payment_intents", params=params)
        response.raise_for_status()
        body = response.json()
        results.extend(item for item in body["data"] if item["status"] == "succeeded")
        if not body.get("has_more"):
            return results
        starting_after = body["data"][-1]["id"]


async def reconcile_accounting_period(
    session: AsyncSession, intents: Iterable[Mapping[str, object]], *, period_start: datetime
) -> ReconciliationReportForAccountingPeriod:
    report = ReconciliationReportForAccountingPeriod(
        period_start, period_start + timedelta(days=31)
    )
    by_reference = {str(intent["id"]): intent for intent in intents}
    rows = await session.execute(
        select(InvoiceRecord)
        .where(InvoiceRecord.issued_at >= period_start)
        .order_by(InvoiceRecord.id)
    )
    for invoice in rows.scalars():
        intent = by_reference.pop(str(invoice.payment_intent_reference), None)
        if intent is None:
            continue
        amount = MoneyAmount(int(intent["amount_received"]), str(intent["currency"]).upper())
        report.mark_matched(invoice.number, amount)
    report.unmatched_payment_intent_identifiers.extend(sorted(by_reference))
    log.info(
        "reconciled %d invoices, %d unmatched intents",
        len(report.matched_invoice_identifiers),
        len(report.unmatched_payment_intent_identifiers),
    )
    return report


# Test fixtures ---------------------------------------------------------------------------------

SAMPLE_WEBHOOK_PAYLOAD = (
    b'{"id": "evt_test_webhook", "type": "payment_intent.succeeded", "livemode": false}'
)
EXPECTED_IDEMPOTENCY_KEYS = {
    (1042, "INV-2024-000117"): encode_idempotency_key(1042, "INV-2024-000117"),
    (1043, "INV-2024-000118"): encode_idempotency_key(1043, "INV-2024-000118"),
}
TRANSLATION_TABLE_FOR_LEGACY_EXPORTS = str.maketrans("ÄÖÜäöüß", "AOUaous")
