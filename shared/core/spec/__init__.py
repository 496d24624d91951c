"""T3, early termination (pure); T2's admission and division live in `spex.shared.roofline.admission`."""
