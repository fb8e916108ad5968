"""Houses for sale, as a listings site publishes them: the events that stored searches ("tell me when a
house in Delft under 400,000 with a garden comes up") are matched against.

Each listing is ``{"listing_id", "event_time", "city", "street", "price", "bedrooms", "area_m2", "title",
"features"}``; the title is a short advertisement made of the listing's own features and a few stock
phrases, so full-text queries and field filters both have something to find.
"""

from __future__ import annotations

import random
from datetime import datetime, timezone

CITIES = ["Amsterdam", "Rotterdam", "Delft", "Utrecht", "Leiden", "Haarlem", "Groningen", "Eindhoven",
          "Den Haag", "Zwolle"]
STREETS = ["Oude Delft", "Prinsengracht", "Kerkstraat", "Stationsweg", "Molenlaan", "Singel", "Dorpsstraat",
           "Havenkade", "Parkweg", "Marktplein"]
FEATURES = ["garden", "balcony", "roof terrace", "garage", "canal view", "fireplace", "solar panels",
            "bath", "cellar", "leasehold"]
PHRASES = ["close to the station", "quiet street", "fully renovated", "sunny", "characteristic",
           "energy label A", "needs work", "open house saturday", "ready to move in"]
KINDS = ["apartment", "terraced house", "semi-detached house", "villa", "houseboat", "studio"]


def listings(count: int = 10_000, seed: int = 11, start_ms: int = 1_767_225_600_000, every_ms: int = 1000):
    """``count`` listings, one every ``every_ms`` of event time."""
    if count < 0 or every_ms <= 0:
        raise ValueError("count must not be negative and every_ms must be positive")
    rng = random.Random(seed)
    for i in range(count):
        city = rng.choice(CITIES)
        bedrooms = rng.randint(1, 6)
        area = rng.randint(30, 60) + bedrooms * rng.randint(15, 30)
        price = int(area * rng.randint(2500, 6500) / 1000) * 1000
        features = sorted(rng.sample(FEATURES, rng.randint(0, 4)))
        kind = rng.choice(KINDS[:1] + KINDS[4:] if bedrooms == 1 else KINDS[:5])
        words = [f"{kind} in {city}"] + [f"with {f}" for f in features[:2]] + rng.sample(PHRASES, 2)
        yield {
            "listing_id": f"L{i + 1:06d}",
            "event_time": datetime.fromtimestamp((start_ms + i * every_ms) / 1000, tz=timezone.utc)
            .isoformat(timespec="seconds").replace("+00:00", "Z"),
            "city": city, "street": f"{rng.choice(STREETS)} {rng.randint(1, 250)}", "price": price,
            "bedrooms": bedrooms, "area_m2": area, "kind": kind, "title": ", ".join(words),
            "features": features,
        }
